"""Which member owns which partition, computed the way Kafka's assignors compute it (pure).

* **range** (``RangeAssignor``): per topic, members sorted by id; ``P // N`` partitions each and
  "the first few consumers will have one extra partition" (``P % N`` of them), in contiguous
  runs. 6 partitions on 4 members: 2, 2, 1, 1; on 8 members: 1 x 6 and two idle (R-LAB-2).
* **roundrobin**: partitions dealt in turn to members sorted by id -- the same counts as range
  for one topic, interleaved instead of contiguous.
* **cooperative-sticky**: balanced (counts differ by at most one) and, on a membership change,
  only the partitions that must move do: a member that stays keeps what it had.

Member ids are the lab's instance ids (``m00``, ``m01``, ...), which sort as their index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline.pool.config import Assignment

Plan = dict[str, tuple[int, ...]]


def range_assign(partitions: int, members: Sequence[str]) -> Plan:
    ordered = sorted(members)
    if not ordered:
        return {}
    each, extra = divmod(partitions, len(ordered))
    plan: Plan = {}
    start = 0
    for i, m in enumerate(ordered):
        n = each + (1 if i < extra else 0)
        plan[m] = tuple(range(start, start + n))
        start += n
    return plan


def roundrobin_assign(partitions: int, members: Sequence[str]) -> Plan:
    ordered = sorted(members)
    if not ordered:
        return {}
    owned: dict[str, list[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        owned[ordered[p % len(ordered)]].append(p)
    return {m: tuple(ps) for m, ps in owned.items()}


def sticky_assign(
    partitions: int, members: Sequence[str], previous: Mapping[str, Sequence[int]] | None = None
) -> Plan:
    """Balanced, keeping each staying member's partitions where the balance allows."""
    ordered = sorted(members)
    if not ordered:
        return {}
    each, extra = divmod(partitions, len(ordered))
    previous = previous or {}
    owned: dict[str, list[int]] = {m: [] for m in ordered}
    taken: set[int] = set()
    # members that already hold the most keep theirs first, capped at their new quota
    by_size = sorted(ordered, key=lambda m: (-len(previous.get(m, ())), m))
    quota = {m: each + (1 if i < extra else 0) for i, m in enumerate(by_size)}
    for m in by_size:
        for p in sorted(previous.get(m, ())):
            if p < partitions and p not in taken and len(owned[m]) < quota[m]:
                owned[m].append(p)
                taken.add(p)
    free = [p for p in range(partitions) if p not in taken]
    for m in by_size:
        while len(owned[m]) < quota[m] and free:
            owned[m].append(free.pop(0))
    return {m: tuple(sorted(ps)) for m, ps in owned.items()}


def assign(strategy: Assignment, partitions: int, members: Sequence[str]) -> Plan:
    if strategy is Assignment.RANGE:
        return range_assign(partitions, members)
    if strategy is Assignment.ROUNDROBIN:
        return roundrobin_assign(partitions, members)
    return sticky_assign(partitions, members)


def counts(plan: Mapping[str, Sequence[int]]) -> list[int]:
    """Partition counts per member, largest first (what "assignment agrees exactly" compares)."""
    return sorted((len(ps) for ps in plan.values()), reverse=True)


def moved(before: Mapping[str, Sequence[int]], after: Mapping[str, Sequence[int]]) -> int:
    """Partitions whose owner changed (a partition no one owned before does not count)."""
    owner = {p: m for m, ps in before.items() for p in ps}
    return sum(1 for m, ps in after.items() for p in ps if p in owner and owner[p] != m)


def member_ids(count: int) -> list[str]:
    return [f"m{i:02d}" for i in range(count)]
