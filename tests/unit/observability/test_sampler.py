"""The sampler's cost stays flat as the fleet grows; caches and failure behaviour."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.observability import METRICS, LagCollector, LagSampler, SamplerConfig

from .fakes import FakeReader, FixedStore

NOW = 1_000_000.0


def fleet(topics: int, partitions: int, groups: int) -> FakeReader:
    r = FakeReader()
    for t in range(topics):
        for p in range(partitions):
            r.marks[(f"fleet.t{t}", p)] = (0, 100)
            r.stamps[(f"fleet.t{t}", p, 40)] = int((NOW - 30) * 1000)
    for g in range(groups):
        r.committed[f"fleet.g{g}"] = {tp: 40 for tp in r.marks}
    r.marks[("fleet.dlq", 0)] = (2, 9)
    r.stamps[("fleet.dlq", 0, 2)] = int((NOW - 60) * 1000)
    return r


def sampler(r: FakeReader, **kw: object) -> LagSampler:
    return LagSampler(r, SamplerConfig(**kw), clock=lambda: NOW)  # type: ignore[arg-type]


def test_calls_per_cycle_do_not_grow_with_partitions_or_groups() -> None:
    small, big = fleet(1, 2, 1), fleet(20, 25, 20)
    for r in (small, big):
        sampler(r).sample()
    assert small.calls == big.calls
    assert big.calls["watermarks"] == 1 and big.calls["record_timestamps"] == 1


def test_lag_seconds_from_record_at_committed_offset_and_cached() -> None:
    r = fleet(1, 2, 2)
    s = sampler(r)
    first = s.sample()
    assert {p.lag_seconds for p in first.partitions} == {30.0}
    assert {p.lag_messages for p in first.partitions} == {60}
    s.sample()
    # same committed offsets: the immutable record's timestamp is not fetched again
    assert r.calls["record_timestamps"] == 1


def test_caught_up_partition_needs_no_fetch_and_reads_zero() -> None:
    r = fleet(1, 1, 1)
    r.committed["fleet.g0"][("fleet.t0", 0)] = 100
    sample = sampler(r, dlq_topic=None).sample()  # (a DLQ's oldest record is read once)
    assert sample.partitions[0].lag_seconds == 0.0
    assert "record_timestamps" not in r.calls


def test_unreadable_record_falls_back_to_first_seen_lower_bound() -> None:
    r = fleet(1, 1, 1)
    r.stamps.clear()
    clock = [NOW]
    s = LagSampler(r, SamplerConfig(), clock=lambda: clock[0])
    assert s.sample().partitions[0].lag_seconds == 0.0
    clock[0] += 20
    assert s.sample().partitions[0].lag_seconds == 20.0


def test_dlq_depth_is_end_minus_start() -> None:
    sample = sampler(fleet(1, 1, 1)).sample()
    assert sample.dlq is not None and sample.dlq.messages == 7


def test_dlq_age_is_the_oldest_retained_record_and_fetched_once() -> None:
    """R-DLQ-3: alarm on DLQ depth AND age -- age of the oldest retained dead letter."""
    r = fleet(1, 1, 1)
    r.marks[("fleet.dlq", 1)] = (0, 3)
    r.stamps[("fleet.dlq", 0, 2)] = int((NOW - 500) * 1000)
    r.stamps[("fleet.dlq", 1, 0)] = int((NOW - 900) * 1000)
    s = sampler(r)
    first = s.sample()
    assert first.dlq is not None and first.dlq.oldest_age_seconds == 900.0
    s.sample()
    assert r.calls["record_timestamps"] == 1, "the same oldest records are not read again"
    r.marks[("fleet.dlq", 1)] = (3, 3)  # partition 1 drained by retention: 0 is next oldest
    assert s.sample().dlq.oldest_age_seconds == 500.0  # type: ignore[union-attr]


def test_empty_dlq_has_age_zero_and_unreadable_age_is_unknown() -> None:
    r = fleet(1, 1, 1)
    r.marks[("fleet.dlq", 0)] = (9, 9)
    assert sampler(r).sample().dlq.oldest_age_seconds == 0.0  # type: ignore[union-attr]
    r.marks[("fleet.dlq", 0)] = (2, 9)  # records, but no timestamp readable
    del r.stamps[("fleet.dlq", 0, 2)]
    assert sampler(r).sample().dlq.oldest_age_seconds is None  # type: ignore[union-attr]


def test_broker_down_keeps_last_positions_and_reports_broker_down() -> None:
    r = fleet(1, 2, 1)
    s = sampler(r)
    s.sample()
    r.down = True
    sample = s.sample()
    assert not sample.broker_ok and sample.errors
    assert len(sample.partitions) == 2


def test_collector_renders_every_family_from_cache_with_store_gauges() -> None:
    r = fleet(1, 2, 1)
    s = LagSampler(r, SamplerConfig(), store=FixedStore(), clock=lambda: NOW)
    s.sample()
    calls_before = dict(r.calls)
    registry = CollectorRegistry()
    LagCollector(lambda: s.latest, lambda: s.cycles).register(registry)
    text = generate_latest(registry).decode()
    assert r.calls == calls_before  # a scrape never calls the broker
    names = {m.name for m in text_string_to_metric_families(text)}
    assert names == {n.removesuffix("_total") for n in METRICS}
    assert (
        'fleet_consumer_lag_seconds{group="fleet.g0",partition="0",topic="fleet.t0"} 30.0' in text
    )
    assert "fleet_outbox_oldest_unsent_age_seconds 12.5" in text
    assert "fleet_exporter_last_sample_timestamp_seconds 1e+06" in text


def test_only_transaction_markers_unread_reads_zero_seconds_not_a_growing_age() -> None:
    """kafka-lag-exporter's "absurd time lag": a read_committed group committed just before a
    commit marker shows lag 1 forever. Nothing is waiting, so the time lag is 0."""
    r = fleet(1, 1, 1)
    r.committed["fleet.g0"][("fleet.t0", 0)] = 99
    r.markers_only.add(("fleet.t0", 0))
    clock = [NOW]
    s = LagSampler(r, SamplerConfig(), clock=lambda: clock[0])
    s.sample()
    clock[0] += 600
    (row,) = s.sample().partitions
    assert row.lag_messages == 1
    assert row.lag_seconds == 0.0
    assert r.calls["record_timestamps"] == 2  # not cached: data may be appended any time
