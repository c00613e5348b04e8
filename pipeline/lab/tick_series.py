"""What the ticks say (pure): consume rates from committed offsets, whether the group has
settled, when total lag crossed a level, who owns each partition. Times are scenario seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .observe import Tick
from .scenario import Scenario


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


def committed_total(t: Tick) -> int:
    return sum(max(0, c) for c in t.committed)


def rate_between(a: Tick, b: Tick) -> float | None:
    return None if b.t <= a.t else (committed_total(b) - committed_total(a)) / (b.t - a.t)


def settled(tick: Tick, s: Scenario) -> bool:
    """The coordinator says STABLE, every member is in the group, every partition is owned once."""
    owned = sorted(p for ps in tick.assignment.values() for p in ps)
    return (
        tick.group_state == "STABLE"
        and owned == list(range(s.partitions))
        and len(tick.assignment) == s.members.count
    )


def lag_crossing(prev: Tick | None, t: Tick, level: float) -> float:
    """When total lag fell to ``level`` between tick ``prev`` (above it) and ``t`` (at or below)."""
    if prev is None:
        return t.t
    above, below = sum(prev.lag), sum(t.lag)
    if above <= level or above <= below:
        return t.t
    return prev.t + (t.t - prev.t) * (above - level) / (above - below)


def owners(t: Tick) -> dict[int, str]:
    return {part: m for m, ps in t.assignment.items() for part in ps}
