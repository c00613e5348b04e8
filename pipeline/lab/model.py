"""The model alone: everything ``fleet lab predict`` says about a scenario, before any run.

Assumptions (``docs/lab.md`` discusses where they break):

* A **lane** is one record in flight. With per-partition concurrency a member runs one record
  per assigned partition at once (capped by ``max_in_flight``); with per-key concurrency one per
  key of its partitions (capped likewise). Capacity = busy lanes / mean step time.
* Partition shares come from the key weights: key ``i`` lands on partition ``i % P``.
* During an outage of every member nothing is consumed; the backlog is ``rate x duration``. A
  partial outage's partitions move to the survivors after the detection gap (the session timeout
  for kill -9 or for a static member; ~0 for a dynamic member that leaves on SIGTERM).
* Drain after the outage: per lane group. A member whose partitions each have their own lane
  drains each partition on its own (``backlog_p / (1/step - rate_p)``, the slowest wins); a
  member whose lanes are shared drains its backlog pooled. Evenly spread, both equal R-LAB-1's
  ``backlog / (capacity - rate)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pipeline.pool.config import Assignment
from pipeline.runtime.lanes import Concurrency

from . import formulas as f
from .assignors import Plan, assign, counts, member_ids, moved, sticky_assign
from .scenario import Scenario, StopSignal


@dataclass(frozen=True, kw_only=True)
class OutagePrediction:
    at_s: float
    duration_s: float
    members: tuple[int, ...]
    signal: str
    backlog: float
    drain_s: float  # after the members are back; inf = never
    duplicates_bound: int
    # partial outages: partitions that change owner when the survivors take over (sticky: only
    # the stopped members'; range/roundrobin recompute the whole plan)
    moved_partitions: int = 0


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Every predicted number of one scenario (scenario time)."""

    rate: float
    step_s: float
    worst_step_s: float
    plan: dict[str, tuple[int, ...]]
    counts: list[int]
    idle_members: int
    lanes: dict[str, int]
    busy_lanes: int
    capacity: float
    in_flight: float  # Little's law at the offered rate (capped by the lanes when saturated)
    utilisation: float
    throughput: float  # min(rate, capacity)
    hottest_partition_utilisation: float
    outages: tuple[OutagePrediction, ...]
    duplicates_bound: int  # over every fault of the run
    initial_lag: int
    lag_drain_s: float | None
    poison_stall_s: float | None
    poison_events_behind: float | None
    batch_s: float
    max_poll_interval_s: float
    naive_loop_exceeds_poll_interval: bool

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        return {k: _finite(v) for k, v in out.items()}


def _finite(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "never"
    if isinstance(value, float):
        return round(value, 6)  # 3599.9999999999995 is 3,600
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def partition_shares(s: Scenario) -> list[float]:
    shares = [0.0] * s.partitions
    for i, w in enumerate(s.keys.weights()):
        shares[i % s.partitions] += w
    return shares


def lanes_of(s: Scenario, plan: Plan) -> dict[str, int]:
    cap = s.members.max_in_flight
    out: dict[str, int] = {}
    for m, parts in plan.items():
        if s.members.concurrency is Concurrency.KEY:
            owned = set(parts)
            n = sum(1 for k in range(s.keys.count) if k % s.partitions in owned)
        else:
            n = len(parts)
        out[m] = min(n, cap)
    return out


def _drain_after(
    s: Scenario, plan: Plan, lanes: dict[str, int], backlog_share: list[float]
) -> float:
    """Slowest drain over lane groups, given each partition's backlog (events)."""
    rate, step = s.arrival.mean_rate, s.step.mean_s
    shares = partition_shares(s)
    worst = 0.0
    for m, parts in plan.items():
        if not parts:
            continue
        own_lanes = s.members.concurrency is Concurrency.PARTITION and lanes[m] >= len(parts)
        if own_lanes:
            for p in parts:
                worst = max(worst, f.drain_seconds(backlog_share[p], 1.0 / step, rate * shares[p]))
        else:
            load = rate * sum(shares[p] for p in parts)
            pending = sum(backlog_share[p] for p in parts)
            worst = max(worst, f.drain_seconds(pending, f.capacity(lanes[m], step), load))
    return worst


def predict(s: Scenario) -> Prediction:
    rate, step = s.arrival.mean_rate, s.step.mean_s
    ids = member_ids(s.members.count)
    plan = assign(s.members.assignment, s.partitions, ids)
    lanes = lanes_of(s, plan)
    busy = sum(lanes.values())
    cap = f.capacity(busy, step)
    shares = partition_shares(s)
    outages = tuple(_outage(s, plan, lanes, cap, o) for o in s.outages)
    dup_faults = sum(o.duplicates_bound for o in outages) + sum(
        s.members.max_poll_records for _ in s.restarts
    )
    lag_drain = None
    if s.lag.initial:
        out_rate = s.lag.consume_rate if s.lag.consume_rate is not None else cap
        lag_drain = f.lag_drain_seconds(s.lag.initial, rate, out_rate)
    stall = behind = None
    if s.poison is not None:
        stall = f.poison_stall_seconds(
            s.poison.backoffs_s, step_s=step, count_attempts=s.poison.count_attempts
        )
        behind = f.events_behind(stall, rate, s.partitions, share=shares[0])
    return Prediction(
        rate=rate,
        step_s=step,
        worst_step_s=s.step.worst,
        plan=plan,
        counts=counts(plan),
        idle_members=sum(1 for ps in plan.values() if not ps),
        lanes=lanes,
        busy_lanes=busy,
        capacity=cap,
        in_flight=min(f.in_flight(rate, step), float(busy)),
        utilisation=f.utilisation(rate, cap),
        throughput=min(rate, cap),
        hottest_partition_utilisation=rate * max(shares) * step,
        outages=outages,
        duplicates_bound=dup_faults,
        initial_lag=sum(s.lag.initial),
        lag_drain_s=lag_drain,
        poison_stall_s=stall,
        poison_events_behind=behind,
        batch_s=f.batch_seconds(s.members.max_poll_records, s.step.worst),
        max_poll_interval_s=s.members.max_poll_interval_ms / 1000.0,
        naive_loop_exceeds_poll_interval=f.exceeds_poll_interval(
            s.members.max_poll_records, s.step.worst, s.members.max_poll_interval_ms
        ),
    )


def _outage(
    s: Scenario, plan: Plan, lanes: dict[str, int], cap: float, o: object
) -> OutagePrediction:
    from .scenario import Outage

    assert isinstance(o, Outage)
    rate = s.arrival.mean_rate
    stopped = s.stopped(o)
    ids = member_ids(s.members.count)
    shares = partition_shares(s)
    if len(stopped) == s.members.count:
        per_partition = [f.backlog(rate * sh, o.duration_s) for sh in shares]
        drain = _drain_after(s, plan, lanes, per_partition)
        backlog = sum(per_partition)
        moved_n = 0
    else:
        dead = {ids[i] for i in stopped}
        orphan_share = sum(shares[p] for m in dead for p in plan[m])
        detect = o.duration_s
        if o.signal is StopSignal.TERM and not s.members.static_membership:
            detect = 0.0
        else:
            detect = min(o.duration_s, s.members.session_timeout_ms / 1000.0)
        survivors = [m for m in ids if m not in dead]
        if s.members.assignment is Assignment.COOPERATIVE_STICKY:
            surv_plan = sticky_assign(s.partitions, survivors, previous=plan)
        else:
            surv_plan = assign(s.members.assignment, s.partitions, survivors)
        moved_n = moved(plan, surv_plan)
        surv_cap = f.capacity(sum(lanes_of(s, surv_plan).values()), s.step.mean_s)
        backlog = rate * orphan_share * detect + max(0.0, rate - surv_cap) * (o.duration_s - detect)
        drain = f.drain_seconds(backlog, cap, rate)
    return OutagePrediction(
        at_s=o.at_s,
        duration_s=o.duration_s,
        members=stopped,
        signal=o.signal.value,
        backlog=backlog,
        drain_s=drain,
        duplicates_bound=f.duplicates_bound(len(stopped), s.members.max_poll_records),
        moved_partitions=moved_n,
    )
