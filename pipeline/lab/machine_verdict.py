"""Whether the machine, not the model, decided a run's result (pure, but for the core count).

Checked: the CPU (all cores, and the run's own share), the cores the run needs at its busiest at
this time scale, steps overrunning their schedule, lanes idle while records wait, a drain's
budget for per-step overhead, and the producer keeping the schedule.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pipeline.runtime.lanes import Concurrency

from .comparison import TOLERANCE
from .machine import cores
from .model import Prediction, lanes_of
from .observe import Tick
from .scenario import Scenario
from .step_log import Step, in_flight_series

CPU_SATURATED = 0.90  # busy share of all cores above which the machine is the bottleneck
STEP_OVERHEAD = 0.10  # steps taking 10% longer than scheduled: the machine, not the model
PRODUCER_SHORTFALL = 0.05  # producing 5% under the arrival rate
LANE_GAP = 0.10  # a lane idle 10% of a step between two steps of a backlogged partition
MACHINE_SHARE = 0.5  # the run may use half the machine's cores at its busiest (shared 2 cores)


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


def _idle_lanes_with_backlog(
    s: Scenario, ticks: Sequence[Tick], steps: Sequence[Step]
) -> float | None:
    """Mean share of the lanes running a step at ticks where every member is up and every
    owned partition has at least two records waiting; None when there is no such tick."""
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
