"""The run's analysis and report on synthetic observations (pure: the broker-facing part is
covered by tests/integration/test_lab_run.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.lab import machine
from pipeline.lab.analysis import analyse
from pipeline.lab.arrivals import events
from pipeline.lab.assignors import member_ids, range_assign
from pipeline.lab.loader import load_scenario
from pipeline.lab.machine_verdict import lane_gaps, machine_verdict
from pipeline.lab.model import predict
from pipeline.lab.observe import Tick
from pipeline.lab.plots import write_plots
from pipeline.lab.report import write_reports
from pipeline.lab.scenario import Scenario
from pipeline.lab.step_log import Step
from pipeline.runtime.lanes import Concurrency
from pipeline.support import procfs

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "lab"


def fluid_ticks(s: Scenario, *, cpu: float = 0.5, rejoin_s: float = 0.0) -> list[Tick]:
    """What the model says a run looks like, one tick per scenario second: arrivals even over
    partitions; consumption at min(capacity, arrivals + backlog) while members are up, per
    partition (per-partition lanes) or pooled (key lanes)."""
    p = predict(s)
    plan = {
        m: list(ps) for m, ps in range_assign(s.partitions, member_ids(s.members.count)).items()
    }
    n = s.partitions
    end = [float(x) for x in s.lag.initial] if s.lag.initial else [0.0] * n
    done = [0.0] * n
    ticks = []
    for sec in range(int(s.duration_s) + 1):
        down = any(o.at_s <= sec < o.at_s + o.duration_s + rejoin_s for o in s.outages)
        ticks.append(
            Tick(
                t=float(sec),
                wall=float(sec),
                committed=[int(c) for c in done],
                log_end=[int(e) for e in end],
                lag=[int(e) - int(c) for e, c in zip(end, done, strict=True)],
                lag_seconds=[0.0] * n,
                assignment={} if down else plan,
                group_state="EMPTY" if down else "STABLE",
                members_up=0 if down else s.members.count,
                cpu_busy=cpu,
            )
        )
        for i in range(n):
            end[i] += p.rate / n
        if down:
            continue
        if s.members.concurrency is Concurrency.KEY:  # pooled lanes: serve in proportion to backlog
            backlog = [e - c for e, c in zip(end, done, strict=True)]
            take = min(p.capacity, sum(backlog))
            for i in range(n):
                done[i] += take * backlog[i] / sum(backlog) if sum(backlog) else 0.0
        else:
            for i in range(n):
                done[i] = min(end[i], done[i] + p.capacity / n)
    return ticks


def test_worked_example_fluid_run_agrees_with_the_model(tmp_path: Path) -> None:
    s = load_scenario(EXAMPLES / "worked_example.toml")
    p = predict(s)
    a = analyse(s, p, fluid_ticks(s), [], {"produced_rate": 20.0, "late_p99_s": 0.0})
    rows = {r.quantity: r for r in a.rows}
    assert rows["partitions per member"].measured == [12, 12, 12, 12]
    assert rows["partitions per member"].ok
    drain = rows["drain after outage at 120 s (s)"]
    assert drain.measured == pytest.approx(900, rel=0.02) and drain.ok
    assert rows["throughput at saturation (events/s)"].measured == pytest.approx(24, rel=0.02)
    assert rows["redelivered records (bound)"].measured == 0
    assert a.machine_bound == []
    plots = write_plots(tmp_path, s, p, fluid_ticks(s), [])
    write_reports(tmp_path, s, p, a, {"producer": {}}, plots)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["agrees"] is True
    assert {"lag.png", "throughput.png", "in_flight.png", "duplicates.png"} <= {
        f.name for f in tmp_path.iterdir()
    }
    assert "| partitions per member | [12, 12, 12, 12] |" in (tmp_path / "report.md").read_text()


def test_a_slow_rejoin_shows_as_a_longer_drain_and_is_flagged() -> None:
    """A rejoin the model has no term for (here 200 scenario seconds) pushes the drain out of
    tolerance (here past the end of the run): the comparison must say so, not hide it."""
    s = load_scenario(EXAMPLES / "worked_example.toml")
    a = analyse(s, predict(s), fluid_ticks(s, rejoin_s=200), [], {})
    (drain,) = [r for r in a.rows if r.quantity.startswith("drain after")]
    assert drain.ok is False and drain.measured == "not drained"
    rejoin = float(re.search(r"first progress ([0-9.]+) s", drain.note).group(1))  # type: ignore[union-attr]
    assert rejoin >= 200
    # the capacity is still measured: from the first progress to the end of the run
    sat = next(r for r in a.rows if r.quantity == "throughput at saturation (events/s)")
    assert sat.measured == pytest.approx(24, rel=0.02) and sat.ok
    assert "the backlog outlasted it" in sat.note


def test_capacity_is_read_from_the_groups_first_stable_plan_after_the_rejoin() -> None:
    """The first member back may own every partition and move a few records before the others
    join and an eager rebalance stops them all: that stretch is the rejoin, not the pool's
    capacity (the model's capacity has every member up)."""
    s = load_scenario(EXAMPLES / "worked_example.toml")
    ticks = fluid_ticks(s, rejoin_s=100)
    k = next(
        i
        for i, t in enumerate(ticks)
        if t.t >= 300 and sum(t.committed) > 0 and sum(t.committed) > sum(ticks[i - 1].committed)
    )
    frozen = list(ticks[k].committed)
    lost = [b - a for a, b in zip(frozen, ticks[k + 30].committed, strict=True)]
    for i in range(k, len(ticks)):
        t = ticks[i]
        if i < k + 30:  # one member holds everything, then the rebalance: nothing moves
            committed = list(frozen)
            t = replace(t, assignment={"m00": list(range(s.partitions))})
            t = replace(t, group_state="PREPARING_REBALANCE")
        else:
            committed = [c - d for c, d in zip(t.committed, lost, strict=True)]
        lag = [e - c for e, c in zip(t.log_end, committed, strict=True)]
        ticks[i] = replace(t, committed=committed, lag=lag)
    a = analyse(s, predict(s), ticks, [], {})
    sat = next(r for r in a.rows if r.quantity == "throughput at saturation (events/s)")
    assert sat.measured == pytest.approx(24, rel=0.02), sat


def test_never_draining_backlog_is_reported_as_not_drained() -> None:
    s = load_scenario(EXAMPLES / "never_drains.toml")
    a = analyse(s, predict(s), fluid_ticks(s), [], {})
    (drain,) = [r for r in a.rows if r.quantity.startswith("drain after")]
    assert drain.predicted == "never" and drain.measured == "not drained" and drain.ok
    sat = next(r for r in a.rows if r.quantity == "throughput at saturation (events/s)")
    assert sat.predicted == 20 and sat.measured == pytest.approx(20, rel=0.02)


def test_duplicates_counted_against_their_bound() -> None:
    s = load_scenario(EXAMPLES / "worked_example.toml")
    steps = [
        Step(seq=i % 150, member="m00", partition=0, t0=i, t1=i + 2, scheduled_s=0.2)
        for i in range(300)
    ]
    a = analyse(s, predict(s), fluid_ticks(s), steps, {})
    (dup,) = [r for r in a.rows if r.quantity.startswith("redelivered")]
    assert dup.measured == 150 and dup.ok and dup.ratio == pytest.approx(0.75)


def test_machine_verdict_names_cpu_slow_steps_and_a_lagging_producer() -> None:
    # at time scale 0.2 a send 0.5 s late is more than a step (400 ms wall) late
    s = dataclasses.replace(load_scenario(EXAMPLES / "worked_example.toml"), time_scale=0.2)
    ticks = fluid_ticks(s, cpu=0.97)
    slow = [Step(seq=1, member="m00", partition=0, t0=0.0, t1=3.0, scheduled_s=2.0)]
    facts: dict[str, object] = {}
    reasons = machine_verdict(s, ticks, slow, {"produced_rate": 15.0, "late_p99_s": 0.5}, facts)
    text = " ".join(reasons)
    assert "CPU saturated" in text and "longer than scheduled" in text
    assert "producer fell 25%" in text and "late" in text


def test_machine_verdict_names_a_time_scale_too_fast_and_the_run_s_share_of_the_cpu() -> None:
    """How far the time scale may go: CPU per step x events per wall second at the run's
    busiest (capacity: the worked example drains a backlog) against half the cores."""
    s = dataclasses.replace(load_scenario(EXAMPLES / "worked_example.toml"), time_scale=0.1)
    ticks = [dataclasses.replace(t, cpu_busy=1.0, run_cores=0.4) for t in fluid_ticks(s)]
    steps = [
        Step(seq=i, member="m00", partition=0, t0=2.0 * i, t1=2.0 * i + 2.0, scheduled_s=2.0)
        for i in range(100)
    ]
    facts: dict[str, object] = {}
    # 100 steps cost 2 CPU s: 20 ms each; capacity 24/s at scale 0.1 = 240/s wall = 4.8 cores
    reasons = machine_verdict(s, ticks, steps, {}, facts, prediction=predict(s), run_cpu_s=2.0)
    text = " ".join(reasons)
    assert facts["cpu_ms_per_step"] == 20.0
    assert facts["cores_needed_at_peak"] == pytest.approx(4.8)
    budget = 0.5 * machine.cores()
    assert facts["fastest_time_scale"] == pytest.approx(0.1 * 4.8 / budget, rel=1e-3)
    assert "time scale 0.1 is too fast" in text
    assert "this run's members and producer: 0.40" in text  # not all of it was this run
    facts = {}
    calm = machine_verdict(s, ticks, steps, {}, facts, prediction=predict(s), run_cpu_s=0.01)
    assert not any("too fast" in r for r in calm)


def test_lane_gaps_count_only_idle_time_with_records_waiting() -> None:
    """A lane idle while its partition has a backlog is the machine (the model never idles a
    lane with a record waiting); a lane idle for want of records is not counted."""
    s = load_scenario(EXAMPLES / "worked_example.toml")
    ticks = [
        dataclasses.replace(t, lag=[10 if t.t < 4 else 0] * s.partitions)
        for t in fluid_ticks(s)[:60]
    ]
    steps = [  # partition 0: 1 s idle between steps while backlogged, then 10 s idle without
        Step(seq=1, member="m00", partition=0, t0=0.0, t1=2.0, scheduled_s=2.0),
        Step(seq=2, member="m00", partition=0, t0=3.0, t1=5.0, scheduled_s=2.0),
        Step(seq=3, member="m00", partition=0, t0=30.0, t1=32.0, scheduled_s=2.0),
        Step(seq=4, member="m00", partition=0, t0=42.0, t1=44.0, scheduled_s=2.0),
    ]
    assert lane_gaps(s, ticks, steps) == [1.0]
    facts: dict[str, object] = {}
    reasons = machine_verdict(s, ticks, steps, {}, facts)
    assert facts["lane_gap_median_of_step"] == 0.5
    assert any("stood idle 50% of a step" in r for r in reasons)


def test_process_cpu_counts_a_busy_child_and_not_its_start_up() -> None:
    """What the child used before ``reset`` is not counted, what it used after is: the meter's
    total lies between 0 and the child's own CPU time across the counted span. On a shared
    machine a spinning child may get a small share of a core, so the test waits (bounded) for
    it to have used some CPU instead of assuming a share within a fixed sleep."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        meter = machine.ProcessCpu()
        time.sleep(0.3)  # start-up and some spinning, before the reset: not counted
        before = procfs.cpu_s(child.pid)
        meter.reset([child.pid])
        used: float | None = None
        deadline = time.monotonic() + 60
        while meter.total_s <= 0.05 and time.monotonic() < deadline:
            time.sleep(0.2)
            used = meter.cores([child.pid])
        after = procfs.cpu_s(child.pid)
        assert used is not None and used > 0  # spinning: some share of a core
        assert before is not None and after is not None
        assert 0.05 < meter.total_s <= after - before
    finally:
        child.kill()
        child.wait()
    assert meter.cores([child.pid]) is None  # gone: nothing measured


def test_arrivals_are_even_and_seeded() -> None:
    s = load_scenario(EXAMPLES / "worked_example.toml")
    evs = list(events(s))
    assert len(evs) == pytest.approx(s.duration_s * 20, abs=1)
    per_part = [0] * s.partitions
    for e in evs:
        per_part[e.partition] += 1
    assert max(per_part) - min(per_part) <= 1  # R-LAB-1: "events spread evenly"
    lag = load_scenario(EXAMPLES / "lag_drain.toml")
    pre = [e for e in events(lag) if e.prefill]
    assert [sum(1 for e in pre if e.partition == p) for p in range(3)] == [50, 0, 160]
    assert list(events(lag))[:5] == list(events(lag))[:5]


def test_poison_stall_measured_from_its_attempts() -> None:
    """R-LAB-4: attempts at 0, 1, 3, 7, 15, 31 s (backoffs 1..16) stall 31 s."""
    s = load_scenario(EXAMPLES / "poison.toml")
    starts = [100.0, 101.0, 103.0, 107.0, 115.0, 131.0]
    tries = [
        Step(seq=7, member="m00", partition=0, t0=t, t1=t, scheduled_s=0.2, poison=True)
        for t in starts
    ]
    a = analyse(s, predict(s), fluid_ticks(s), tries, {})
    rows = {r.quantity: r for r in a.rows}
    assert rows["poison stall (s)"].measured == pytest.approx(31.0) and rows["poison stall (s)"].ok


def test_a_rebalance_without_a_fault_is_counted() -> None:
    """R-LAB-5: a member that keeps polling is never dropped; an assignment change
    while everyone is up and no fault is due is what a blown max.poll.interval looks like."""
    s = load_scenario(EXAMPLES / "slow_batch.toml")
    ticks = fluid_ticks(s)
    assert {r.quantity: r for r in analyse(s, predict(s), ticks, [], {}).rows}[
        "rebalances without a fault"
    ].measured == 0
    moved = [
        Tick(**{**t.__dict__, "assignment": {"m00": [0, 1]}}) if 400 <= t.t < 450 else t
        for t in ticks
    ]
    row = {r.quantity: r for r in analyse(s, predict(s), moved, [], {}).rows}[
        "rebalances without a fault"
    ]
    assert row.measured == 2 and row.ok is False


def test_initial_lag_drain_pooled_matches_seed_example() -> None:
    """R-LAB-3 lag example: 210 behind at 30/s in and 45/s out (pooled) drains in 14 s."""
    s = load_scenario(EXAMPLES / "lag_drain.toml")
    a = analyse(s, predict(s), fluid_ticks(s), [], {})
    (drain,) = [r for r in a.rows if r.quantity == "initial lag drain (s)"]
    assert drain.measured == pytest.approx(14.0, abs=1.0) and drain.ok
    assert "after the start" in drain.note


def test_drain_end_is_interpolated_between_ticks() -> None:
    """The lag is sampled per tick: the drain ends between the last tick above the steady level
    and the first one at it, not at the later tick (half a tick period too long on average)."""
    s = load_scenario(EXAMPLES / "lag_drain.toml")
    sparse = [t for t in fluid_ticks(s) if t.t % 5 == 0]  # ticks 5 s apart: 0, 5, 10, 15, ...
    a = analyse(s, predict(s), sparse, [], {})
    (drain,) = [r for r in a.rows if r.quantity == "initial lag drain (s)"]
    # 210 + 30/s in, 45/s out: at 10 s 60 behind, at 15 s 0; the level (2.1) is crossed at 14.6
    assert 14.0 < drain.measured < 15.0


def test_in_flight_is_the_step_logs_time_average_with_the_measured_step_in_the_note() -> None:
    """Little's law on the step log: 2/s of steps taking 2.2 s (10% over a 2 s schedule) hold
    4.4 in flight on average, exactly, however few ticks the window has; the note names the
    measured step time so an overrun is not mistaken for the model missing."""
    s = load_scenario(EXAMPLES / "six_on_four.toml")
    steps = [
        Step(seq=i, member="m00", partition=i % 6, t0=i * 0.5, t1=i * 0.5 + 2.2, scheduled_s=2.0)
        for i in range(600)
    ]
    ticks = [t for t in fluid_ticks(s) if t.t % 7 == 0]  # sparse: 7 s apart
    rows = {r.quantity: r for r in analyse(s, predict(s), ticks, steps, {}).rows}
    row = rows["in flight (Little's law)"]
    assert row.measured == pytest.approx(4.4, rel=0.01)
    assert "1.100 x their scheduled time" in row.note


def test_the_initial_lag_goes_out_at_t0_not_at_the_producers_start(tmp_path: Path) -> None:
    """The model has the backlog in the log at t = 0, with arrivals from t = 0. A prefill sent
    as soon as the producer started landed up to a second late under load (its imports ran past
    t = 0), with the arrivals due meanwhile in a burst behind it: lag_drain 3 x that too long."""
    from pipeline.lab.producer import produce

    sent: list[float] = []

    class Fake:
        def produce(self, topic: str, **kw: object) -> None:
            sent.append(time.time())

        def poll(self, _t: float) -> int:
            return 0

        def flush(self, _t: float) -> int:
            return 0

    s = dataclasses.replace(load_scenario(EXAMPLES / "lag_drain.toml"), duration_s=0.2)
    start_at = time.time() + 0.3
    stats = produce(
        s,
        bootstrap="fake:0",
        topic="t",
        start_at=start_at,
        stats=tmp_path / "p.json",
        producer_factory=lambda _conf: Fake(),
    )
    assert stats["prefilled"] == 210 and sent
    assert sent[0] >= start_at  # the first of the prefill: not before t = 0
    assert stats["prefill_late_s"] is not None and stats["prefill_late_s"] >= 0


def test_the_drain_row_says_what_the_model_gives_at_the_measured_capacity_and_rejoin() -> None:
    """A 10 s rejoin at full capacity: the drain measures 10 + (3,600 + 20 x 10) / 4 = 960 s,
    and the row says that the model's formula at this run's capacity and rejoin gives the same
    -- the 60 s over the prediction are the rejoin, not the formula."""
    s = load_scenario(EXAMPLES / "worked_example.toml")
    a = analyse(s, predict(s), fluid_ticks(s, rejoin_s=10), [], {})
    (drain,) = [r for r in a.rows if r.quantity.startswith("drain after")]
    assert drain.measured == pytest.approx(960, rel=0.02)
    assert a.facts["drain_at_measured_capacity_s"] == pytest.approx(drain.measured, rel=0.02)
    assert "the model at the measured capacity 24" in drain.note
    assert "first progress" in drain.note


def test_machine_verdict_names_a_step_overrun_the_drain_cannot_absorb() -> None:
    """At 83% utilisation the worked example's drain multiplies a capacity shortfall by 6, so
    +-10% on it allows steps 1.7% over schedule: 3.4% over (the lab's 400 ms steps with 13.6 ms
    of store transactions and wake-ups each) is named with the time scale that would absorb it;
    1% is not. A scenario without a finite drain (never_drains) has no such budget."""
    s = dataclasses.replace(load_scenario(EXAMPLES / "worked_example.toml"), time_scale=0.2)

    def steps(over: float) -> list[Step]:
        return [
            Step(seq=i, member="m00", partition=0, t0=2.0 * i, t1=2.0 * i + 2.0 * (1 + over),
                 scheduled_s=2.0)
            for i in range(50)
        ]  # fmt: skip

    facts: dict[str, object] = {}
    text = " ".join(machine_verdict(s, [], steps(0.034), {}, facts, prediction=predict(s)))
    assert facts["drain_step_overhead_budget"] == pytest.approx(0.1 / 6, rel=1e-2)
    assert facts["drain_time_scale"] == pytest.approx(0.2 * 0.034 * 6 / 0.1, rel=1e-2)
    assert "allows 1.7%" in text and "14 ms a step" in text
    facts = {}
    assert not machine_verdict(s, [], steps(0.01), {}, facts, prediction=predict(s))
    never = load_scenario(EXAMPLES / "never_drains.toml")
    facts = {}
    text = " ".join(machine_verdict(never, [], steps(0.034), {}, facts, prediction=predict(never)))
    assert "allows" not in text and "drain_step_overhead_budget" not in facts
