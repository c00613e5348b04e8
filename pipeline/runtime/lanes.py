"""Lanes and the commit watermark: which fetched record may start, and what may be committed.

Pure bookkeeping, no threads and no I/O (the dispatcher in :mod:`.inflight` owns the threads).
Rules it upholds (``docs/pools.md``):

- **At most one step in flight per lane.** A lane is a partition (``partition`` mode, R-POOL-2:
  each partition is processed one event at a time) or a ``(partition, key)`` pair (``key``
  mode: key-ordered parallelism). Records of a lane start in offset order.
- **The watermark.** A partition's committable offset is the lowest offset fetched and not yet
  finished (or the rewind floor, see :meth:`Lanes.rewind`); with nothing outstanding, one past the
  highest finished offset. An offset is never committed past a record still queued or running.
- **Bounded buffer.** At most ``depth`` records per partition are held (queued or running); a
  partition at its depth is reported ``full`` so the loop pauses it and keeps polling (one fetch
  may still bring more records of one partition: they wait in their lane).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from pipeline.record import Record

TP = tuple[str, int]
LaneKey = tuple[str, int, str | None]


class Concurrency(enum.StrEnum):
    """What a member runs in parallel: one record per partition, or one per key."""

    PARTITION = "partition"
    KEY = "key"


@dataclass
class _Partition:
    outstanding: dict[int, Record] = field(default_factory=dict)  # fetched, not finished
    finished_to: int | None = None  # one past the highest finished offset
    floor: int | None = None  # rewound here: nothing at or past it is committable yet


class Lanes:
    """Per-lane queues and per-partition watermarks (see the module docstring)."""

    def __init__(self, mode: Concurrency, *, depth: int) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.mode = mode
        self.depth = depth
        self._queues: dict[LaneKey, deque[Record]] = {}
        self._running: dict[LaneKey, Record] = {}
        self._parts: dict[TP, _Partition] = {}

    def lane_of(self, rec: Record) -> LaneKey:
        key = rec.key_str if self.mode is Concurrency.KEY else None
        return (rec.topic, rec.partition, key)

    # -- intake ------------------------------------------------------------------------------
    def add(self, rec: Record) -> None:
        part = self._parts.setdefault(rec.tp, _Partition())
        if rec.offset in part.outstanding:
            return  # fetched twice (a seek raced a fetch): one copy is enough
        if part.floor is not None and rec.offset <= part.floor:
            part.floor = None  # the rewound record is back in the buffer
        part.outstanding[rec.offset] = rec
        self._queues.setdefault(self.lane_of(rec), deque()).append(rec)

    def startable(self, limit: int) -> list[Record]:
        """Heads of idle lanes, at most ``limit``; they are marked running."""
        out: list[Record] = []
        for lane, queue in self._queues.items():
            if len(out) >= limit:
                break
            if queue and lane not in self._running:
                rec = queue.popleft()
                self._running[lane] = rec
                out.append(rec)
        self._queues = {k: q for k, q in self._queues.items() if q}
        return out

    def finish(self, rec: Record) -> bool:
        """A step ended; ``False`` when its partition was revoked or rewound meanwhile."""
        lane = self.lane_of(rec)
        if self._running.get(lane) is not rec:
            return False
        del self._running[lane]
        part = self._parts.get(rec.tp)
        if part is None or part.outstanding.get(rec.offset) is not rec:
            return False  # revoked, or rewound past it: the re-read copy takes its place
        del part.outstanding[rec.offset]
        part.finished_to = max(part.finished_to or 0, rec.offset + 1)
        return True

    # -- state -------------------------------------------------------------------------------
    def holds(self, rec: Record) -> bool:
        """``rec`` (this partition and offset) is already queued or running."""
        part = self._parts.get(rec.tp)
        return part is not None and rec.offset in part.outstanding

    def held(self, tp: TP) -> int:
        part = self._parts.get(tp)
        return len(part.outstanding) if part else 0

    def full(self, tp: TP) -> bool:
        return self.held(tp) >= self.depth

    def total_held(self) -> int:
        return sum(len(p.outstanding) for p in self._parts.values())

    def running(self, tps: set[TP] | None = None) -> list[Record]:
        return [r for r in self._running.values() if tps is None or r.tp in tps]

    def partitions(self) -> list[TP]:
        return list(self._parts)

    def watermark(self, tp: TP) -> int | None:
        """The committable offset of ``tp`` (``None``: nothing finished or fetched yet)."""
        part = self._parts.get(tp)
        if part is None:
            return None
        low = [*part.outstanding, *([part.floor] if part.floor is not None else [])]
        if low:
            return min(low)
        return part.finished_to

    # -- rewind and revoke -------------------------------------------------------------------
    def rewind(self, tp: TP, offset: int) -> tuple[int, list[Record]]:
        """The partition must be handled again from ``offset`` (a retry or a failed transaction).

        Queued records are dropped; returns where handling resumes -- ``offset``, or lower when
        a dropped record of another key came earlier (key mode) -- and the records dropped from
        there on (queued, and running ones), so the caller can hand them back (:meth:`add`)
        instead of re-reading them. Running steps finish, but nothing from that offset on is
        committable until its record is added again, and a step that started at or past it is
        discarded when it ends (the added copy takes its place)."""
        queued = [r for k, q in self._queues.items() if (k[0], k[1]) == tp for r in q]
        low = self.forget_queued({tp}).get(tp, offset)
        seek = min(offset, low)
        part = self._parts.setdefault(tp, _Partition())
        dropped = [*queued, *(r for o, r in part.outstanding.items() if o >= seek)]
        part.outstanding = {o: r for o, r in part.outstanding.items() if o < seek}
        part.floor = seek if part.floor is None else min(part.floor, seek)
        return seek, sorted({r.offset: r for r in dropped}.values(), key=lambda r: r.offset)

    def forget_queued(self, tps: set[TP]) -> dict[TP, int]:
        """Drop queued (not running) records of ``tps``; the watermark stays below the lowest
        dropped one. Returns that lowest offset per partition."""
        lowest: dict[TP, int] = {}
        for lane in [k for k in self._queues if (k[0], k[1]) in tps]:
            dropped = self._queues.pop(lane)
            tp = (lane[0], lane[1])
            offsets = {r.offset for r in dropped}
            lowest[tp] = min(lowest.get(tp, min(offsets)), *offsets)
            part = self._parts.get(tp)
            if part is not None:
                for o in offsets:
                    part.outstanding.pop(o, None)
                part.floor = lowest[tp] if part.floor is None else min(part.floor, lowest[tp])
        return lowest

    def forget(self, tps: set[TP]) -> list[Record]:
        """Revoked or lost: drop every trace; returns the steps still running (given up)."""
        self.forget_queued(tps)
        gone = [r for r in self._running.values() if r.tp in tps]
        for r in gone:
            del self._running[self.lane_of(r)]
        for tp in tps:
            self._parts.pop(tp, None)
        return gone
