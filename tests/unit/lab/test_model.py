"""The lab's model against the R-LAB worked numbers (pure: no broker, no clock)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.capacity import formulas as f
from pipeline.lab.assignors import (
    counts,
    member_ids,
    moved,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)
from pipeline.lab.loader import load_scenario
from pipeline.lab.model import predict
from pipeline.lab.scenario import Keys, Members, Outage, Scenario, StopSignal
from pipeline.pool.config import Assignment

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "lab"


def test_worked_example_numbers() -> None:
    """R-LAB-1 worked example: capacity 24/s, 83%, backlog 3,600 drains in 900 s, <= 200."""
    p = predict(load_scenario(EXAMPLES / "worked_example.toml"))
    assert p.in_flight == pytest.approx(40.0)
    assert p.capacity == pytest.approx(24.0)
    assert p.utilisation == pytest.approx(20 / 24)
    (outage,) = p.outages
    assert outage.backlog == pytest.approx(3600.0)
    assert outage.drain_s == pytest.approx(900.0)
    assert outage.duplicates_bound == 200
    assert p.counts == [12, 12, 12, 12]


def test_forty_partitions_never_drain() -> None:
    """R-LAB-1: with 40 partitions capacity is 20/s, equal to arrivals: never drains."""
    p = predict(load_scenario(EXAMPLES / "never_drains.toml"))
    assert p.capacity == pytest.approx(20.0)
    assert math.isinf(p.outages[0].drain_s)
    assert p.to_json()["outages"][0]["drain_s"] == "never"  # type: ignore[index]


def test_range_assignor_six_partitions() -> None:
    """R-LAB-2: range gives 2, 2, 1, 1 (the first members take the extra ones);
    with eight members two own nothing."""
    plan = range_assign(6, member_ids(4))
    assert [len(plan[m]) for m in member_ids(4)] == [2, 2, 1, 1]
    assert plan["m00"] == (0, 1) and plan["m03"] == (5,)
    eight = range_assign(6, member_ids(8))
    assert counts(eight) == [1, 1, 1, 1, 1, 1, 0, 0]
    assert eight["m06"] == () and eight["m07"] == ()
    assert predict(load_scenario(EXAMPLES / "six_on_eight.toml")).idle_members == 2


def test_range_sorts_member_ids() -> None:
    plan = range_assign(5, ["b", "a"])
    assert plan == {"a": (0, 1, 2), "b": (3, 4)}


def test_roundrobin_and_sticky_balance() -> None:
    rr = roundrobin_assign(6, member_ids(4))
    assert rr["m00"] == (0, 4) and rr["m02"] == (2,)
    before = sticky_assign(6, member_ids(4))
    assert counts(before) == [2, 2, 1, 1]
    after = sticky_assign(6, member_ids(3), previous=before)
    # only the departed member's partition moves; everyone else keeps theirs
    assert moved(before, after) == 1
    assert sorted(p for ps in after.values() for p in ps) == list(range(6))
    for m in member_ids(3):
        assert set(before[m]) <= set(after[m])


def test_lag_drain_seed_example() -> None:
    """R-LAB-3: lags 50, 0, 160 at 30/s in and 45/s out drain in 14 s."""
    assert f.lag_drain_seconds([50, 0, 160], 30.0, 45.0) == pytest.approx(14.0)
    assert math.isinf(f.lag_drain_seconds([10], 45.0, 45.0))
    assert predict(load_scenario(EXAMPLES / "lag_drain.toml")).lag_drain_s == pytest.approx(
        14.0, rel=1e-5
    )


def test_poison_stall() -> None:
    """R-LAB-4: backoffs 1..16 s stall 31 s; 20/s over 48 partitions: ~13 behind."""
    assert f.poison_stall_seconds([1, 2, 4, 8, 16]) == 31.0
    assert f.events_behind(31.0, 20.0, 48) == pytest.approx(12.9, abs=0.05)
    p = predict(load_scenario(EXAMPLES / "poison.toml"))
    assert p.poison_stall_s == 31.0
    assert round(p.poison_events_behind or 0) == 13


def test_slow_batch_blows_poll_interval() -> None:
    """R-LAB-5: 50 x 2 s = 100 s fits in 300 s; 50 x 7 s = 350 s does not."""
    assert not f.exceeds_poll_interval(50, 2.0, 300_000)
    assert f.exceeds_poll_interval(50, 7.0, 300_000)
    p = predict(load_scenario(EXAMPLES / "slow_batch.toml"))
    assert p.batch_s == pytest.approx(350.0)
    assert p.naive_loop_exceeds_poll_interval


def test_member_cap_limits_lanes() -> None:
    """A member capped at 8 in flight runs 8 of its 12 partitions at once: 32 lanes, 16/s."""
    s = Scenario(name="cap", partitions=48, members=Members(count=4, max_in_flight=8))
    p = predict(s)
    assert p.busy_lanes == 32
    assert p.capacity == pytest.approx(16.0)


def test_partial_outage_of_dynamic_members_moves_partitions() -> None:
    """One of four members stops by SIGTERM (a dynamic member leaves the group at once): the
    three survivors take 16 partitions each, 48 lanes again, so no backlog piles up; the bound
    on redelivery is that one member's batch."""
    s = Scenario(
        name="partial",
        partitions=48,
        duration_s=400,
        members=Members(count=4),
        outages=(Outage(at_s=10, duration_s=180, members=(0,)),),
    )
    (o,) = predict(s).outages
    assert o.backlog == pytest.approx(0.0)
    assert o.duplicates_bound == 50


def test_skew_makes_one_partition_hot() -> None:
    s = load_scenario(EXAMPLES / "worked_example.toml")
    skewed = Scenario(
        name="skew", partitions=s.partitions, members=s.members, keys=Keys(count=480, skew=1.0)
    )
    assert predict(skewed).hottest_partition_utilisation > 1.0


def test_sticky_moves_only_the_stopped_members_partitions() -> None:
    """One of four members stops: cooperative-sticky moves its 12 partitions; range recomputes
    the plan for three members (16 each) and moves more than that."""

    def moved_for(strategy: Assignment) -> int:
        s = Scenario(
            name="m",
            partitions=48,
            duration_s=400,
            members=Members(count=4, assignment=strategy),
            outages=(Outage(at_s=10, duration_s=60, members=(3,), signal=StopSignal.KILL),),
        )
        return predict(s).outages[0].moved_partitions

    assert moved_for(Assignment.COOPERATIVE_STICKY) == 12
    assert moved_for(Assignment.RANGE) > 12


def test_poison_backoffs_reach_the_members_as_their_retry_policy() -> None:
    """The members retry the poison record with the scenario's backoffs, scaled, no jitter
    (the runtime's default 0.2 s x 2^n with jitter would not be R-LAB-4's 1, 2, 4, 8, 16 s)."""
    from pipeline.lab.members import member_argv
    from pipeline.pool.config import parse_retry

    s = load_scenario(EXAMPLES / "poison.toml")
    argv = member_argv(s, pool="p", bootstrap="b", member="m00", store_url="u", events=Path("e"))
    policy = parse_retry(argv[argv.index("--retry") + 1])
    waits = [policy.delay_for(a) for a in range(1, 6)]
    assert waits == pytest.approx([b * s.time_scale for b in (1, 2, 4, 8, 16)])
    assert not policy.exhausted(5) and policy.exhausted(6)  # five waits, six attempts


def test_poison_backoffs_must_be_geometric() -> None:
    from pipeline.errors import ConfigError
    from pipeline.lab.scenario import Poison

    with pytest.raises(ConfigError, match="geometric"):
        Poison(backoffs_s=(1.0, 3.0, 4.0))
    assert Poison(backoffs_s=(5.0,)).retry_option(0.5) == "2.5:1.0:2:0"


def test_an_outages_replacements_start_ahead_and_join_at_its_end() -> None:
    """The model's outage is members out of the group for d seconds: the lab spawns the
    replacements ``REJOIN_LEAD_S`` wall seconds before the outage ends (never before it began)
    and they join at its end, so their start-up does not lengthen the outage. A restart's
    replacement starts and joins at once."""
    from pipeline.lab.runner import REJOIN_LEAD_S, _faults
    from pipeline.lab.scenario import Restart

    s = load_scenario(EXAMPLES / "worked_example.toml")
    o = s.outages[0]
    end = o.at_s + o.duration_s
    starts = [f for f in _faults(s) if f[2] == "start"]
    assert len(starts) == 4
    for at, _order, _action, _member, _how, join in starts:
        assert join == end
        assert at == pytest.approx(max(o.at_s, end - REJOIN_LEAD_S / s.time_scale))
        assert o.at_s <= at < end
    # an outage shorter than the lead: the replacement is spawned when the member stops
    short = Scenario(
        name="short",
        partitions=4,
        time_scale=0.5,
        outages=(Outage(at_s=10.0, duration_s=4.0, members=(1,), signal=StopSignal.TERM),),
        restarts=(Restart(at_s=30.0, member=0, signal=StopSignal.KILL),),
        members=Members(count=2),
    )
    faults = sorted(_faults(short))
    assert [(f[0], f[2], f[3], f[5]) for f in faults] == [
        (10.0, "stop", "m01", 10.0),
        (10.0, "start", "m01", 14.0),
        (30.0, "stop", "m00", 30.0),
        (30.0, "start", "m00", 30.0),
    ]


def test_a_member_waiting_to_join_is_not_up(tmp_path: Path) -> None:
    """A replacement spawned ahead of its outage's end counts as down until it joins (the
    analysis reads "every member up" from the ticks)."""
    import subprocess
    import sys
    import time

    from pipeline.lab.members import Members as Procs
    from pipeline.support.processes import FleetProcess

    s = load_scenario(EXAMPLES / "worked_example.toml")
    procs = Procs(scenario=s, pool="p", bootstrap="b", out=tmp_path, store_url="u")
    for m, join in (("m00", None), ("m01", time.time() + 3600)):
        handle = FleetProcess(tmp_path / f"{m}.log", name=m)
        handle.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        procs.procs[m] = handle
        procs.joins[m] = join if join is not None else 0.0
    try:
        now = time.time()
        assert procs.up(now) == 1
        assert procs.up(now + 7200) == 2
    finally:
        for p in procs.procs.values():
            p.kill9()
