"""Human text for a :class:`~pipeline.lab.model.Prediction` (``fleet lab predict``)."""

from __future__ import annotations

import math

from .model import Prediction
from .scenario import Scenario


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    return f"{value:,.1f} s"


def prediction_lines(s: Scenario, p: Prediction) -> list[str]:
    m = s.members
    lines = [
        f"scenario {s.name}: {s.partitions} partitions, {m.count} members "
        f"({m.assignment.value}, {m.concurrency.value} concurrency), "
        f"{p.rate:g} events/s, {p.step_s:g} s steps (time scale {s.time_scale:g})",
        f"assignment      {', '.join(str(c) for c in p.counts)} partitions per member"
        + (f" ({p.idle_members} idle)" if p.idle_members else ""),
        f"in flight       {p.in_flight:,.1f} (Little's law: {p.rate:g}/s x {p.step_s:g} s)",
        f"capacity        {p.capacity:,.2f} events/s ({p.busy_lanes} busy lanes / {p.step_s:g} s)",
        f"utilisation     {p.utilisation:.0%}"
        + ("  -- saturated: the backlog grows" if p.utilisation >= 1 else ""),
    ]
    if p.hottest_partition_utilisation > p.utilisation * 1.01:
        lines.append(f"hottest part.   {p.hottest_partition_utilisation:.0%} busy (key skew)")
    for o in p.outages:
        who = "all members" if len(o.members) == m.count else f"members {list(o.members)}"
        lines.append(
            f"outage @{o.at_s:g}s   {who} for {o.duration_s:g} s ({o.signal}): backlog "
            f"{o.backlog:,.0f}, drains in {seconds(o.drain_s)}, redelivered <= {o.duplicates_bound}"
            + (f", {o.moved_partitions} partitions change owner" if o.moved_partitions else "")
        )
    if p.outages or s.restarts:
        lines.append(f"duplicates      at most {p.duplicates_bound} redelivered over the run")
    if p.lag_drain_s is not None:
        lines.append(f"initial lag     {p.initial_lag:,} drains in {seconds(p.lag_drain_s)}")
    if p.poison_stall_s is not None and p.poison_events_behind is not None:
        lines.append(
            f"poison record   stalls its partition {seconds(p.poison_stall_s)}, "
            f"~{p.poison_events_behind:.1f} events queue behind it"
        )
    verdict = "EXCEEDS" if p.naive_loop_exceeds_poll_interval else "within"
    lines.append(
        f"poll interval   batch x worst step = {m.max_poll_records} x {p.worst_step_s:g} s = "
        f"{p.batch_s:,.0f} s, {verdict} max.poll.interval.ms ({p.max_poll_interval_s:g} s) for a "
        "loop that polls only between batches; a pool member keeps polling"
    )
    return lines
