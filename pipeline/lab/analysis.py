"""From a run's raw observations to measured numbers, set beside the model's (pure).

Inputs: the ticks (lag per partition, assignment, CPU), the step log (one line per executed
step: seq, member, partition, start, end, scheduled step time) and the producer's stats. All
times here are scenario seconds except where a name says ``wall``.

What "measured" means for each quantity, and why, is in ``docs/lab.md``.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.capacity import formulas as f
from pipeline.runtime.lanes import Concurrency

from .machine import cores
from .model import Prediction
from .observe import Tick
from .scenario import Scenario

TOLERANCE = 0.10  # acceptance: measured within +-10% of predicted
CPU_SATURATED = 0.90  # busy share of all cores above which the machine is the bottleneck
STEP_OVERHEAD = 0.10  # steps taking 10% longer than scheduled: the machine, not the model
PRODUCER_SHORTFALL = 0.05  # producing 5% under the arrival rate
LANE_GAP = 0.10  # a lane idle 10% of a step between two steps of a backlogged partition
MACHINE_SHARE = 0.5  # the run may use half the machine's cores at its busiest (shared 2 cores)


@dataclass(frozen=True, kw_only=True)
class Step:
    seq: int
    member: str
    partition: int
    t0: float  # scenario seconds
    t1: float
    scheduled_s: float
    poison: bool = False
    # the pool's event kinds: ran (a real step), reused (a stored result: no second step),
    # duplicate (already applied, dropped), error (a failed attempt)
    kind: str = "ran"

    @property
    def stepped(self) -> bool:
        return self.kind in ("ran", "error")


@dataclass(frozen=True, kw_only=True)
class Row:
    quantity: str
    predicted: Any
    measured: Any
    ratio: float | None
    ok: bool | None  # None: not comparable in this run (reported, not judged)
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Analysis:
    rows: list[Row]
    machine_bound: list[str]  # reasons; empty when the model, not the machine, decided
    series: dict[str, list[float]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def consumed_series(ticks: Sequence[Tick]) -> tuple[list[float], list[float]]:
    """(times, consume rate) between consecutive ticks, from committed offsets."""
    times, rates = [], []
    for a, b in itertools.pairwise(ticks):
        dt = b.t - a.t
        if dt <= 0:
            continue
        moved = sum(
            max(0, max(cb, 0) - max(ca, 0)) for ca, cb in zip(a.committed, b.committed, strict=True)
        )
        times.append(b.t)
        rates.append(moved / dt)
    return times, rates


def _committed_total(t: Tick) -> int:
    return sum(max(0, c) for c in t.committed)


def _rate_between(a: Tick, b: Tick) -> float | None:
    return None if b.t <= a.t else (_committed_total(b) - _committed_total(a)) / (b.t - a.t)


def in_flight_series(steps: Sequence[Step], times: Sequence[float]) -> list[float]:
    """Steps running at each time (a point sample of the step log)."""
    return [float(sum(1 for s in steps if s.stepped and s.t0 <= t < s.t1)) for t in times]


def mean_in_flight(steps: Sequence[Step], t0: float, t1: float) -> float | None:
    """Steps running, averaged over ``[t0, t1]``: step-seconds inside the window / its length.

    The time average Little's law speaks of, exact from the step log. Point samples at the
    ticks (20-50 of them in a shipped scenario's window) scatter by several percent around it:
    six_on_eight's 27 ticks read 5.44 where the step log holds 5.22 = lambda x measured step."""
    if t1 <= t0:
        return None
    busy = sum(max(0.0, min(s.t1, t1) - max(s.t0, t0)) for s in steps if s.stepped)
    return busy / (t1 - t0)


def _drain(
    ticks: Sequence[Tick], start: float, baseline: float
) -> tuple[float | None, Tick | None, Tick | None]:
    """Seconds from ``start`` until total lag is back at ``baseline``; also the first tick with
    progress (the group rejoined) and the tick where the drain ended.

    The lag is a sample per tick (0.5-0.7 wall s apart), so the drain ends between the last tick
    above ``baseline`` and the first one at or below it: the crossing is interpolated linearly
    between the two. Taking the later tick instead would add half a tick period on average --
    5% of lag_drain's 14 s at time scale 1."""
    after = [t for t in ticks if t.t >= start]
    if not after:
        return None, None, None
    first = after[0]
    rejoined = next((t for t in after if _committed_total(t) > _committed_total(first)), None)
    for prev, t in itertools.pairwise([None, *after]):
        if rejoined is not None and t is not None and t.t >= rejoined.t and sum(t.lag) <= baseline:
            return _crossing(prev, t, baseline) - start, rejoined, t
    return None, rejoined, None


def _at_measured(
    row: Row, facts: dict[str, Any], rate: float, backlog: float, capacity: float, rejoin_s: float
) -> Row:
    """The model's drain with this run's own capacity and rejoin (arrivals go on meanwhile):
    ``rejoin + (backlog + rate x rejoin) / (capacity - rate)``. A measured drain that agrees
    with it and not with the prediction was decided by those two numbers, not by the formula
    -- at 83% utilisation a capacity 4% short alone turns the worked example's 900 s into
    1,184 s, and each second of rejoin adds 6."""
    at = rejoin_s + f.drain_seconds(backlog + rate * rejoin_s, capacity, rate)
    facts["drain_at_measured_capacity_s"] = at
    said = "never" if math.isinf(at) else f"{at:,.0f} s"
    note = f"the model at the measured capacity {capacity:.3g}/s and this rejoin: {said}"
    return dataclasses.replace(row, note=f"{row.note}; {note}" if row.note else note)


def _drain_rows(
    s: Scenario,
    p: Prediction,
    ticks: Sequence[Tick],
    drain: tuple[str, float, float, float],
    baseline: float,
    facts: dict[str, Any],
) -> list[Row]:
    """A drain's row (or "never" row) and the pool's capacity measured while it lasted."""
    label, start, predicted, backlog = drain
    rows: list[Row] = []
    took, rejoined, done = _drain(ticks, start, baseline)
    if math.isinf(predicted):
        end_lag = sum(ticks[-1].lag) if ticks else 0
        drained = took is not None
        rows.append(
            Row(
                quantity=label,
                predicted="never",
                measured=took if drained else "not drained",
                ratio=None,
                ok=not drained,
                note=f"lag at the end of the run: {end_lag}",
            )
        )
    else:
        note = ""
        if rejoined is not None:
            after = "the start" if start == 0.0 else "the restart (rejoin)"
            note = f"first progress {rejoined.t - start:.1f} s after {after}"
        if took is None:  # predicted to drain, and did not by the end of the run: a miss
            rows.append(
                Row(
                    quantity=label,
                    predicted=predicted,
                    measured="not drained",
                    ratio=None,
                    ok=False,
                    note=note,
                )
            )
        else:
            rows.append(_row(label, predicted, took, note))
    # the pool's capacity, read while the backlog lasted: from the group's first stable
    # plan after the rejoin (the first member back may hold every partition until the
    # others join, then a stop-the-world rebalance follows) until it drained, or -- a drain
    # that outlasts the run (a slow rejoin, utilisation near 1, "never") -- the run's end
    until = done if done is not None else (ticks[-1] if ticks else None)
    if rejoined is not None and until is not None:
        since = next((t for t in ticks if rejoined.t <= t.t and settled(t, s)), rejoined)
        if until.t > since.t:
            capacity = _rate_between(since, until)
            if math.isfinite(predicted) and capacity is not None:
                rows[0] = _at_measured(
                    rows[0], facts, p.rate, backlog, capacity, rejoined.t - start
                )
            rows.append(
                _row(
                    "throughput at saturation (events/s)",
                    p.capacity,
                    capacity,
                    "mean consume rate while the backlog drained (from the first stable plan)"
                    if done is not None
                    else "mean consume rate from the first stable plan after the rejoin "
                    "to the end of the run (the backlog outlasted it)",
                )
            )
    return rows


def settled(tick: Tick, s: Scenario) -> bool:
    """The coordinator says STABLE, every member is in the group, every partition is owned once."""
    owned = sorted(p for ps in tick.assignment.values() for p in ps)
    return (
        tick.group_state == "STABLE"
        and owned == list(range(s.partitions))
        and len(tick.assignment) == s.members.count
    )


def _crossing(prev: Tick | None, t: Tick, level: float) -> float:
    """When total lag fell to ``level`` between tick ``prev`` (above it) and ``t`` (at or below)."""
    if prev is None:
        return t.t
    above, below = sum(prev.lag), sum(t.lag)
    if above <= level or above <= below:
        return t.t
    return prev.t + (t.t - prev.t) * (above - level) / (above - below)


def _step_note(steps: Sequence[Step], t0: float, t1: float) -> str:
    """Little's law's step time as measured: a step's wall time includes its store round trips
    (claim, stored result), so in flight exceeds rate x scheduled step by as much."""
    ran = [s for s in steps if s.stepped and t0 <= s.t0 < t1 and s.scheduled_s > 0]
    if not ran:
        return ""
    took = statistics.fmean((s.t1 - s.t0) / s.scheduled_s for s in ran)
    return f"steps took {took:.3f} x their scheduled time"


def _row(q: str, predicted: float | None, measured: float | None, note: str = "") -> Row:
    r = f.ratio(measured, predicted)
    ok = None if r is None else abs(r - 1.0) <= TOLERANCE
    return Row(quantity=q, predicted=predicted, measured=measured, ratio=r, ok=ok, note=note)


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
            _row(
                "throughput at offered load (events/s)",
                p.throughput,
                _rate_between(steady[0], steady[-1]),
            )
        )
        if steps:
            rows.append(
                _row(
                    "in flight (Little's law)",
                    p.in_flight,
                    mean_in_flight(steps, steady[0].t, steady[-1].t),
                    _step_note(steps, steady[0].t, steady[-1].t),
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
        rows += _drain_rows(s, p, ticks, drain, baseline, facts)
    rows += _moved_rows(s, p, ticks)
    rows += _poison_rows(s, p, steps, ticks)
    rows.append(_rebalance_row(s, ticks))
    facts["duplicates"] = duplicates = _redelivered(steps)
    facts["steps_paid_twice"] = _paid_twice(steps)
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
        _row("poison stall (s)", p.poison_stall_s, stall, f"{len(tries)} attempts"),
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


def _idle_lanes_with_backlog(
    s: Scenario, ticks: Sequence[Tick], steps: Sequence[Step]
) -> float | None:
    """Mean share of the lanes running a step at ticks where every member is up and every
    owned partition has at least two records waiting; None when there is no such tick."""
    from .model import lanes_of

    backlogged = [
        t for t in ticks if t.members_up == s.members.count and t.assignment and min(t.lag) >= 2
    ]
    if not backlogged or not steps:
        return None
    lanes = sum(lanes_of(s, {m: tuple(ps) for m, ps in backlogged[0].assignment.items()}).values())
    if lanes == 0:
        return None
    busy = in_flight_series(steps, [t.t for t in backlogged])
    return statistics.fmean(busy) / lanes


def lane_gaps(s: Scenario, ticks: Sequence[Tick], steps: Sequence[Step]) -> list[float]:
    """Scenario seconds a partition's lane stood idle between two steps while every member was
    up and the partition had records waiting (lag >= 3: one running, one finished but not yet
    committed, one more). Partition concurrency only; this is where the poll loop, the store and
    the scheduler show (the model's lane is never idle with a record waiting)."""
    if s.members.concurrency is not Concurrency.PARTITION or not ticks:
        return []
    by_partition: dict[int, list[Step]] = defaultdict(list)
    for st in steps:
        if st.stepped:
            by_partition[st.partition].append(st)
    times = [t.t for t in ticks]
    gaps: list[float] = []
    for part, runs in by_partition.items():
        runs.sort(key=lambda st: st.t0)
        for a, b in itertools.pairwise(runs):
            i = bisect.bisect_right(times, a.t1) - 1
            if i < 0 or ticks[i].members_up != s.members.count or part >= len(ticks[i].lag):
                continue
            if ticks[i].lag[part] >= 3:
                gaps.append(max(0.0, b.t0 - a.t1))
    return gaps


def _peak_rate(s: Scenario, p: Prediction) -> float:
    """Events per scenario second the members handle at the run's busiest: capacity when a
    backlog builds (outage, restart, initial lag), else the offered load they keep up with."""
    if s.outages or s.restarts or s.lag.initial or p.utilisation >= 1:
        return p.capacity
    return p.throughput


def _redelivered(steps: Sequence[Step]) -> int:
    """Records delivered to a step more than once (any kind), the poison record's retries aside."""
    return sum(n - 1 for n in Counter(st.seq for st in steps if not st.poison).values() if n > 1)


def _paid_twice(steps: Sequence[Step]) -> int:
    """Events whose step really ran more than once (a second model call); the pool's stored
    results and dedupe should keep this at 0 (seed 001: "store the result ... and reuse it")."""
    ran = Counter(st.seq for st in steps if st.kind == "ran" and not st.poison)
    return sum(n - 1 for n in ran.values() if n > 1)


def _owners(t: Tick) -> dict[int, str]:
    return {part: m for m, ps in t.assignment.items() for part in ps}


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
            if t.t < o.at_s and t.group_state == "STABLE" and sorted(_owners(t)) == whole
        ]
        during = [
            t
            for t in ticks
            if o.at_s < t.t < o.at_s + o.duration_s
            and t.group_state == "STABLE"
            and sorted(_owners(t)) == whole
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
        old, new = _owners(before[-1]), _owners(during[0])
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
    polling through slow steps causes none (seed 001 scenario 2)."""
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


def machine_verdict(
    s: Scenario,
    ticks: Sequence[Tick],
    steps: Sequence[Step],
    producer: dict[str, Any],
    facts: dict[str, Any],
    *,
    prediction: Prediction | None = None,
    run_cpu_s: float | None = None,
) -> list[str]:
    """Reasons the machine, not the model, decided the result (empty: the model did).

    Checked: the CPU (all cores, and the run's own share of it), the CPU one step costs and
    the cores the run needs at its busiest at this time scale (over ``MACHINE_SHARE`` of the
    machine: the time scale is too fast, and the report names the fastest one that fits),
    steps overrunning their scheduled time, lanes idle while records wait (busy share and the
    gap between two steps of a backlogged partition), and the producer keeping the schedule."""
    reasons = _cpu_reasons(ticks, facts)
    if prediction is not None and run_cpu_s:
        reasons += _budget_reasons(s, prediction, steps, run_cpu_s, facts)
    reasons += _lane_reasons(s, ticks, steps, facts)
    if prediction is not None:
        reasons += _drain_budget_reasons(s, prediction, facts)
    rate = producer.get("produced_rate")
    if rate is not None and s.arrival.mean_rate > 0:
        short = 1.0 - rate / s.arrival.mean_rate
        facts["producer_shortfall"] = short
        if short > PRODUCER_SHORTFALL:
            reasons.append(f"producer fell {short:.0%} behind the arrival rate")
    prefill_late = producer.get("prefill_late_s")
    if prefill_late is not None:
        facts["prefill_late_s"] = prefill_late / s.time_scale  # scenario seconds after t = 0
        if prefill_late > 0.5 * s.wall(s.step.mean_s):
            reasons.append(
                f"the initial lag reached the log {prefill_late * 1000:.0f} ms after t = 0, "
                "over half a step: the drain starts that late"
            )
    late = producer.get("late_p99_s")
    if late is not None and late > 0.5 * s.wall(s.step.mean_s):
        reasons.append(
            f"producer sends were up to {late * 1000:.0f} ms late (p99), over half a step"
        )
    return reasons


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.9 * (len(ordered) - 1))]


def _cpu_reasons(ticks: Sequence[Tick], facts: dict[str, Any]) -> list[str]:
    """All cores busy, and how much of that was this run (a shared machine)."""
    n_cores = cores()
    facts["machine_cores"] = n_cores
    ours = [t.run_cores for t in ticks if t.run_cores is not None]
    ours_p90 = _p90(ours) if ours else None
    if ours_p90 is not None:
        facts["run_cores_p90"] = round(ours_p90, 3)
    busy = [t.cpu_busy for t in ticks if t.cpu_busy is not None]
    if not busy:
        return []
    p90 = facts["cpu_busy_p90"] = _p90(busy)
    if p90 < CPU_SATURATED:
        return []
    whose = (
        ""
        if ours_p90 is None
        else f" (this run's members and producer: {ours_p90:.2f} of {n_cores} cores; "
        "the rest is other load on the machine)"
    )
    return [f"CPU saturated: 90th percentile busy share {p90:.0%} of all cores{whose}"]


def _budget_reasons(
    s: Scenario, p: Prediction, steps: Sequence[Step], run_cpu_s: float, facts: dict[str, Any]
) -> list[str]:
    """CPU per step x events per wall second at the run's busiest against a share of the
    cores: how far this time scale may go on this machine."""
    stepped = sum(1 for st in steps if st.stepped)
    if not stepped:
        return []
    per_step = run_cpu_s / stepped
    peak = _peak_rate(s, p) / s.time_scale  # events per wall second
    need = peak * per_step
    n_cores = cores()
    budget = MACHINE_SHARE * n_cores
    fastest = s.time_scale * need / budget
    facts["cpu_ms_per_step"] = round(per_step * 1000, 2)
    facts["cores_needed_at_peak"] = round(need, 3)
    facts["fastest_time_scale"] = round(fastest, 4)
    if need <= budget:
        return []
    return [
        f"time scale {s.time_scale:g} is too fast for this machine: at the run's busiest "
        f"({peak:,.0f} events per wall second) it needs {need:.2f} cores at "
        f"{per_step * 1000:.1f} ms CPU per step, over {MACHINE_SHARE:.0%} of {n_cores} "
        f"cores; a time scale of {fastest:.2g} or slower keeps the machine out of it"
    ]


def _drain_budget_reasons(s: Scenario, p: Prediction, facts: dict[str, Any]) -> list[str]:
    """A drain divides by ``capacity - rate``, so it multiplies a capacity shortfall by
    ``1 / (1 - utilisation)``: +-10% on the drain allows steps at most ``TOLERANCE x (1 -
    utilisation)`` over their schedule (1.7% for the worked example at 83%, 3.3% for the lag
    example at 67%). A pool step's own cost -- its claim and stored-result transactions and its
    wake-ups, a few ms whatever the step's length -- is a larger share of a shorter wall step,
    so the slowest time scale that keeps it inside is named (the overrun taken as fixed in ms)."""
    drains = [o.drain_s for o in p.outages]
    if p.lag_drain_s is not None:
        drains.append(p.lag_drain_s)
    over = facts.get("step_overhead")
    if over is None or not any(math.isfinite(d) and d > 0 for d in drains):
        return []
    budget = TOLERANCE * (1.0 - p.utilisation)
    facts["drain_step_overhead_budget"] = round(budget, 4)
    if budget <= 0 or over <= budget:
        return []
    slowest = s.time_scale * over / budget
    facts["drain_time_scale"] = round(slowest, 3)
    ms = over * s.wall(p.step_s) * 1000
    return [
        f"steps ran {over:.1%} over their schedule ({ms:.0f} ms a step): at "
        f"{p.utilisation:.0%} utilisation a drain multiplies that by "
        f"{1 / (1 - p.utilisation):.1f}, and +-10% on it allows {budget:.1%} -- the pool's "
        f"per-step cost decides the drain at this time scale; about {slowest:.2g} or slower "
        "keeps it inside"
    ]


def _lane_reasons(
    s: Scenario, ticks: Sequence[Tick], steps: Sequence[Step], facts: dict[str, Any]
) -> list[str]:
    """Steps overrunning, lanes idle with records waiting (busy share, gap between steps)."""
    reasons: list[str] = []
    overheads = [
        (st.t1 - st.t0) / st.scheduled_s - 1.0
        for st in steps
        if st.scheduled_s > 0 and st.kind == "ran"
    ]
    if overheads:
        mean = facts["step_overhead"] = statistics.fmean(overheads)
        if mean > STEP_OVERHEAD:
            reasons.append(
                f"steps ran {mean:.0%} longer than scheduled (sleep overshoot, contention)"
            )
    gaps = lane_gaps(s, ticks, steps)
    if gaps and s.step.mean_s > 0:
        gap = statistics.median(gaps) / s.step.mean_s
        facts["lane_gap_median_of_step"] = round(gap, 4)
        facts["lane_gap_p90_of_step"] = round(_p90(gaps) / s.step.mean_s, 4)
        if gap > LANE_GAP:
            reasons.append(
                f"a lane stood idle {gap:.0%} of a step (median) between two steps while its "
                "partition had records waiting: the poll loop, store writes or scheduling"
            )
    idle = _idle_lanes_with_backlog(s, ticks, steps)
    if idle is not None:
        facts["lanes_busy_with_backlog"] = idle
        if idle < 0.8:
            reasons.append(
                f"only {idle:.0%} of the lanes were busy while every partition had a backlog: the "
                "members (store writes, scheduling), not the model, limited throughput"
            )
    return reasons
