"""The consumer side: exactly-once at the fold, idempotent on ``(BranchKey, Lsn)``.

R-OUT-5: "delivery is at-least-once; exactly-once is achieved at the fold, not in transport".
Per branch the fold keeps ``last`` (the highest lsn applied; 0 before the first):

* ``lsn <= last`` -- a redelivery: dropped (counted as a duplicate);
* ``lsn == last + 1`` -- applied, then any held successors that now follow on are applied too;
* ``lsn > last + 1`` -- a gap: held (in memory, bounded) until the missing lsns arrive.

Held records are an optimisation, not a promise: the relay resends a branch from its lowest
unacknowledged lsn, so whatever follows a gap always arrives again after the gap is filled.
To survive restarts, persist ``positions()`` in the same transaction as the effects and pass it
back as ``start=``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pipeline.record import Headers

from .headers import fold_position

T = TypeVar("T")


class Offer(enum.StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    HELD = "held"


class Fold(Generic[T]):
    """Applies each ``(branch_key, lsn)`` exactly once and in lsn order, whatever the transport did."""

    def __init__(
        self,
        apply: Callable[[str, int, T], None] | None = None,
        *,
        start: Mapping[str, int] | None = None,
        max_held_per_branch: int = 10_000,
    ) -> None:
        self._apply = apply
        self._last: dict[str, int] = dict(start or {})
        self._held: dict[str, dict[int, T]] = {}
        self.max_held_per_branch = max_held_per_branch
        self.applied: dict[str, list[tuple[int, T]]] = {}
        self.duplicates = 0

    def offer(self, branch_key: str, lsn: int, item: T) -> Offer:
        last = self._last.get(branch_key, 0)
        if lsn <= last:
            self.duplicates += 1
            return Offer.DUPLICATE
        if lsn > last + 1:
            waiting = self._held.setdefault(branch_key, {})
            if lsn in waiting:
                self.duplicates += 1
                return Offer.DUPLICATE
            if len(waiting) < self.max_held_per_branch:
                waiting[lsn] = item  # beyond the bound it is dropped: the relay resends it anyway
            return Offer.HELD
        self._do_apply(branch_key, lsn, item)
        held = self._held.get(branch_key)
        while held and (self._last[branch_key] + 1) in held:
            nxt = self._last[branch_key] + 1
            self._do_apply(branch_key, nxt, held.pop(nxt))
        if held is not None and not held:
            del self._held[branch_key]
        return Offer.APPLIED

    def offer_record(self, headers: Headers | None, item: T) -> Offer | None:
        """Fold a consumed Kafka record by its ``fleet.branchKey``/``fleet.lsn`` headers.

        Returns ``None`` for a record without them (not an outbox record)."""
        pos = fold_position(headers)
        if pos is None:
            return None
        return self.offer(pos[0], pos[1], item)

    def _do_apply(self, branch_key: str, lsn: int, item: T) -> None:
        if self._apply is not None:
            self._apply(branch_key, lsn, item)
        self.applied.setdefault(branch_key, []).append((lsn, item))
        self._last[branch_key] = lsn

    def last(self, branch_key: str) -> int:
        return self._last.get(branch_key, 0)

    def held(self, branch_key: str) -> int:
        return len(self._held.get(branch_key, {}))

    def positions(self) -> dict[str, int]:
        return dict(self._last)

    def state(self) -> dict[str, list[Any]]:
        """Everything applied, per branch, in lsn order (what a test compares)."""
        return {b: [item for _, item in items] for b, items in sorted(self.applied.items())}
