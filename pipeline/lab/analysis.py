"""From a run's raw observations to measured numbers, set beside the model's (pure).

Inputs: the ticks (lag per partition, assignment, CPU), the step log (one line per executed
step: seq, member, partition, start, end, scheduled step time) and the producer's stats. All
times here are scenario seconds except where a name says ``wall``.

What "measured" means for each quantity, and why, is in ``docs/lab.md``. The parts: the rows'
type (:mod:`.comparison`), the step log and the ticks read on their own (:mod:`.step_log`,
:mod:`.tick_series`), the drains (:mod:`.drain_rows`) and whether the machine decided the run
(:mod:`.machine_verdict`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pipeline.capacity import formulas as f

from .comparison import Analysis, Row, compared
from .drain_rows import drain_rows
from .machine_verdict import machine_verdict
from .model import Prediction
from .observe import Tick
from .scenario import Scenario
from .step_log import Step, mean_in_flight, paid_twice, redelivered, step_note
from .tick_series import owners, rate_between


def analyse(
    s: Scenario,
    p: Prediction,
    ticks: Sequence[Tick],
    steps: Sequence[Step],
    producer: dict[str, Any],
    *,
    run_cpu_s: float | None = None,  # CPU s of the run's members and producer after start-up
) -> Analysis:
    rows: list[Row] = []
    facts: dict[str, Any] = {}
    rows.append(_assignment_row(s, p, ticks, facts))
    outage_windows = [(o.at_s, o.at_s + o.duration_s) for o in s.outages]
    # steady state: members up, outside outages, second half of what precedes the first fault
    first_fault = min([o.at_s for o in s.outages] + [r.at_s for r in s.restarts] + [s.duration_s])
    steady = [
        t
        for t in ticks
        if first_fault * 0.3 <= t.t <= first_fault and t.members_up == s.members.count
    ]
    if not s.lag.initial and len(steady) >= 2 and p.utilisation < 1:
        rows.append(
            compared(
                "throughput at offered load (events/s)",
                p.throughput,
                rate_between(steady[0], steady[-1]),
            )
        )
        if steps:
            rows.append(
                compared(
                    "in flight (Little's law)",
                    p.in_flight,
                    mean_in_flight(steps, steady[0].t, steady[-1].t),
                    step_note(steps, steady[0].t, steady[-1].t),
                )
            )
    # "drained" = total lag back to its steady level plus 1% of the peak backlog. The steady
    # level holds the records in flight and not yet committed: the 90th percentile before the
    # first fault; with initial lag (a backlog from t = 0) the median of the run's last quarter,
    # capped at 10% of the peak so a backlog that never drains is never called drained
    peak = max((sum(t.lag) for t in ticks), default=0)
    if s.lag.initial:
        tail = [sum(t.lag) for t in ticks if t.t >= 0.75 * s.duration_s]
        level = min(statistics.median(tail), 0.1 * peak) if tail else 0.0
    else:
        steady_lag = sorted(sum(t.lag) for t in steady)
        level = steady_lag[int(0.9 * (len(steady_lag) - 1))] if steady_lag else 0
    baseline = level + max(1.0, 0.01 * peak)
    facts["baseline_lag"] = baseline
    drain_starts: list[tuple[str, float, float, float]] = []  # (label, start, predicted, backlog)
    for o, (_, end) in zip(p.outages, outage_windows, strict=True):
        label = f"drain after outage at {o.at_s:g} s (s)"
        drain_starts.append((label, end, o.drain_s, o.backlog))
    if s.lag.initial and p.lag_drain_s is not None:
        drain_starts.append(("initial lag drain (s)", 0.0, p.lag_drain_s, sum(s.lag.initial)))
    for drain in drain_starts:
        rows += drain_rows(s, p, ticks, drain, baseline, facts)
    rows += _moved_rows(s, p, ticks)
    rows += _poison_rows(s, p, steps, ticks)
    rows.append(_rebalance_row(s, ticks))
    facts["duplicates"] = duplicates = redelivered(steps)
    facts["steps_paid_twice"] = paid_twice(steps)
    if s.outages or s.restarts:
        closeness = duplicates / p.duplicates_bound if p.duplicates_bound else None
        rows.append(
            Row(
                quantity="redelivered records (bound)",
                predicted=p.duplicates_bound,
                measured=duplicates,
                ratio=closeness,
                ok=duplicates <= p.duplicates_bound,
                note="ratio = how close to the bound",
            )
        )
    return Analysis(
        rows=rows,
        machine_bound=machine_verdict(
            s, ticks, steps, producer, facts, prediction=p, run_cpu_s=run_cpu_s
        ),
        facts=facts,
    )


def _poison_rows(
    s: Scenario, p: Prediction, steps: Sequence[Step], ticks: Sequence[Tick]
) -> list[Row]:
    """The poison record's partition stall: first attempt's start to last attempt's end."""
    tries = sorted((st for st in steps if st.poison), key=lambda st: st.t0)
    if s.poison is None or p.poison_stall_s is None:
        return []
    if len(tries) < 2:
        return [
            Row(
                quantity="poison stall (s)",
                predicted=p.poison_stall_s,
                measured=None,
                ratio=None,
                ok=False,
                note=f"{len(tries)} attempt(s) seen in the step log",
            )
        ]
    attempts_time = sum(st.t1 - st.t0 for st in tries)
    stall = tries[-1].t1 - tries[0].t0 - (0.0 if s.poison.count_attempts else attempts_time)
    behind = max(
        (t.lag[tries[0].partition] for t in ticks if tries[0].t0 <= t.t <= tries[-1].t1), default=0
    )
    return [
        compared("poison stall (s)", p.poison_stall_s, stall, f"{len(tries)} attempts"),
        Row(
            quantity="events behind the poison record",
            predicted=p.poison_events_behind,
            measured=behind,
            ratio=f.ratio(float(behind), p.poison_events_behind),
            ok=None,
            note="peak lag of its partition (small counts: reported, not judged)",
        ),
    ]


def _assignment_row(
    s: Scenario, p: Prediction, ticks: Sequence[Tick], facts: dict[str, Any]
) -> Row:
    """The last snapshot with every member up, the group STABLE and every partition owned."""
    settled = [
        t
        for t in ticks
        if t.members_up == s.members.count
        and t.group_state == "STABLE"
        # every partition owned exactly once (a dict of owners would hide a double owner)
        and sorted(x for ps in t.assignment.values() for x in ps) == list(range(s.partitions))
        and len(t.assignment) == s.members.count
    ]
    if not settled:
        return Row(
            quantity="partitions per member",
            predicted=p.counts,
            measured=None,
            ratio=None,
            ok=False,
            note="no settled assignment was observed",
        )
    measured = sorted((len(v) for v in settled[-1].assignment.values()), reverse=True)
    facts["assignment"] = settled[-1].assignment
    return Row(
        quantity="partitions per member",
        predicted=p.counts,
        measured=measured,
        ratio=None,
        ok=measured == p.counts,
        note="exact",
    )


def _moved_rows(s: Scenario, p: Prediction, ticks: Sequence[Tick]) -> list[Row]:
    """Partial outages: partitions whose owner changed, last stable plan before against the
    first stable plan of the survivors (compared exactly: the assignor is deterministic)."""
    rows: list[Row] = []
    for o in p.outages:
        if len(o.members) == s.members.count:
            continue
        whole = list(range(s.partitions))
        before = [
            t
            for t in ticks
            if t.t < o.at_s and t.group_state == "STABLE" and sorted(owners(t)) == whole
        ]
        during = [
            t
            for t in ticks
            if o.at_s < t.t < o.at_s + o.duration_s
            and t.group_state == "STABLE"
            and sorted(owners(t)) == whole
            and len(t.assignment) == s.members.count - len(o.members)
        ]
        label = f"partitions moved at {o.at_s:g} s"
        if not before or not during:
            rows.append(
                Row(
                    quantity=label,
                    predicted=o.moved_partitions,
                    measured=None,
                    ratio=None,
                    ok=False,
                    note="no stable assignment seen before and during the outage",
                )
            )
            continue
        old, new = owners(before[-1]), owners(during[0])
        n = sum(1 for part in whole if old[part] != new[part])
        rows.append(
            Row(
                quantity=label,
                predicted=o.moved_partitions,
                measured=n,
                ratio=None,
                ok=n == o.moved_partitions,
                note="exact",
            )
        )
    return rows


def _rebalance_row(s: Scenario, ticks: Sequence[Tick]) -> Row:
    """Assignment changes while every member was up and no fault was due: a member that keeps
    polling through slow steps causes none (R-POOL-5)."""
    faults = [(o.at_s, o.at_s + o.duration_s) for o in s.outages] + [
        (r.at_s, r.at_s) for r in s.restarts
    ]
    changes = 0
    last: dict[str, list[int]] | None = None
    for t in ticks:
        if t.members_up != s.members.count or not t.assignment:
            last = None
            continue
        # a fault's own rebalance (and the settling after it) is expected: 30 scenario s or
        # two session timeouts, whichever is longer
        grace = max(30.0, 2 * s.members.session_timeout_ms / 1000.0 / s.time_scale)
        if any(a <= t.t <= b + grace for a, b in faults):
            last = None
            continue
        if last is not None and t.assignment != last:
            changes += 1
        last = t.assignment
    return Row(
        quantity="rebalances without a fault",
        predicted=0,
        measured=changes,
        ratio=None,
        ok=changes == 0,
        note="assignment changes seen while every member was up",
    )
