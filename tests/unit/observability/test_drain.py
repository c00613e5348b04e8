"""Time to drain per group at the measured rates (the R-LAB-3 lag example, and "never")."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from pipeline.observability import LagCollector, LagSampler, SamplerConfig

from .fakes import FakeReader

NOW = 1_000_000.0
T = "fleet.pool.p"
G = "fleet.pool.p"


def seed_lags() -> FakeReader:
    """R-OBS-3: log ends 1200, 1180, 1260 and committed 1150, 1180, 1100: lags 50, 0, 160."""
    r = FakeReader()
    r.marks = {(T, 0): (0, 1200), (T, 1): (0, 1180), (T, 2): (0, 1260)}
    r.committed = {G: {(T, 0): 1150, (T, 1): 1180, (T, 2): 1100}}
    for p, off in r.committed[G].items():
        r.stamps[(T, p[1], off)] = int((NOW - 5) * 1000)
    return r


def advance(r: FakeReader, seconds: float, in_rate: int, out_rate: int) -> None:
    """``in_rate`` records/s appended to and ``out_rate`` consumed from partition 2."""
    start, end = r.marks[(T, 2)]
    r.marks[(T, 2)] = (start, end + int(in_rate * seconds))
    r.committed[G][(T, 2)] += int(out_rate * seconds)
    # the committed offset moved onto a record whose timestamp the sampler will read
    r.stamps[(T, 2, r.committed[G][(T, 2)])] = int((NOW - 1) * 1000)


def test_seed_lag_example_drains_in_14_seconds() -> None:
    """R-OBS-3: 210 lagging at 30/s in and 45/s out drains in 210 / 15 = 14 s."""
    r = seed_lags()
    clock = [NOW]
    s = LagSampler(r, SamplerConfig(dlq_topic=None, rate_window_s=10), clock=lambda: clock[0])
    first = s.sample()
    (g,) = first.drains
    assert g.lag_messages == 210 and g.drain_seconds is None  # one sample: no rates yet
    advance(r, 10, in_rate=30, out_rate=45)
    clock[0] += 10
    (g,) = s.sample().drains
    assert (g.consume_rate, g.arrival_rate) == (45.0, 30.0)
    # lag is now 210 + 300 - 450 = 60: 60 / 15 = 4 s to go
    assert g.lag_messages == 60
    assert g.drain_seconds == 4.0


def test_never_when_consumption_does_not_outpace_arrivals_and_inf_gauge() -> None:
    r = seed_lags()
    clock = [NOW]
    s = LagSampler(r, SamplerConfig(dlq_topic=None, rate_window_s=10), clock=lambda: clock[0])
    s.sample()
    advance(r, 10, in_rate=30, out_rate=30)
    clock[0] += 10
    (g,) = s.sample().drains
    assert g.drain_seconds is not None and math.isinf(g.drain_seconds)
    registry = CollectorRegistry()
    LagCollector(lambda: s.latest, lambda: s.cycles).register(registry)
    text = generate_latest(registry).decode()
    assert f'fleet_consumer_group_drain_seconds{{group="{G}"}} +Inf' in text
    assert f'fleet_consumer_group_consume_rate{{group="{G}"}} 30.0' in text


def test_rates_use_the_window_not_the_last_interval() -> None:
    r = seed_lags()
    clock = [NOW]
    s = LagSampler(r, SamplerConfig(dlq_topic=None, rate_window_s=20), clock=lambda: clock[0])
    s.sample()
    advance(r, 10, in_rate=30, out_rate=60)
    clock[0] += 10
    s.sample()
    advance(r, 10, in_rate=30, out_rate=0)  # consumption stalls for the last 10 s
    clock[0] += 10
    (g,) = s.sample().drains
    assert g.consume_rate == 30.0  # 600 over 20 s, not 0 over the last 10 s
