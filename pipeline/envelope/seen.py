"""The replay check's memory (R-ENV-5: replay is bounded by expiresAt plus a bounded
seen-set). The gateway's durable dedupe table implements :class:`SeenSet` too; it writes the
msgId in the same transaction as the effect, so a redelivery after a crash is not a replay."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol, runtime_checkable


@runtime_checkable
class SeenSet(Protocol):
    def contains(self, msg_id: str) -> bool: ...


class BoundedSeenSet:
    """In-memory LRU of msgIds, at most ``capacity`` entries; thread-safe."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def contains(self, msg_id: str) -> bool:
        with self._lock:
            if msg_id in self._ids:
                self._ids.move_to_end(msg_id)
                return True
            return False

    def add(self, msg_id: str) -> None:
        with self._lock:
            self._ids[msg_id] = None
            self._ids.move_to_end(msg_id)
            while len(self._ids) > self.capacity:
                self._ids.popitem(last=False)

    def add_all(self, msg_ids: Iterable[str]) -> None:
        """:meth:`add` for each id in order, under one lock (a batch's ids at once)."""
        with self._lock:
            ids = self._ids
            for msg_id in msg_ids:
                ids[msg_id] = None
                ids.move_to_end(msg_id)
            while len(ids) > self.capacity:
                ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)
