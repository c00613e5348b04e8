"""Non-blocking retries: pause the partition, keep polling, resume when due (seed 001 scenario 2).

Sleeping in the handler for a backoff would stall ``poll`` and, near ``max.poll.interval.ms``,
get the member thrown out of the group (a rebalance storm). Instead :meth:`RetryScheduler.defer`
pauses the record's partition and seeks back to it -- the seek drops any records of that
partition already fetched, so nothing behind the failed record is handled out of order -- and the
runtime keeps calling ``poll`` (other partitions flow, heartbeats go on). :meth:`resume_due`
resumes partitions whose wait is over; the record is fetched again and :meth:`attempts_for`
tells the runtime which attempt this is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition


@dataclass(frozen=True, kw_only=True)
class PendingRetry:
    topic: str
    partition: int
    offset: int
    attempt: int  # attempts made so far
    first_failure_ms: int
    due: float  # on the scheduler's clock


class RetryScheduler:
    """Per-partition retry waits for one consumer (one record per partition can be waiting:
    the partition is paused behind it)."""

    def __init__(self, consumer: Consumer, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.consumer = consumer
        self.clock = clock
        self._waiting: dict[tuple[str, int], PendingRetry] = {}
        self._resumed: dict[tuple[str, int], PendingRetry] = {}

    def defer(self, msg: Any, *, delay_s: float, attempt: int, first_failure_ms: int) -> None:
        """Hold ``msg`` for ``delay_s``: pause its partition and rewind to it."""
        tp = TopicPartition(msg.topic(), msg.partition(), msg.offset())
        self.consumer.pause([tp])
        self.consumer.seek(tp)  # also purges prefetched records of this partition
        key = (msg.topic(), msg.partition())
        self._resumed.pop(key, None)
        self._waiting[key] = PendingRetry(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            attempt=attempt,
            first_failure_ms=first_failure_ms,
            due=self.clock() + max(0.0, delay_s),
        )

    def resume_due(self) -> list[PendingRetry]:
        """Resume every partition whose wait is over; call on every loop turn."""
        now = self.clock()
        due = [p for p in self._waiting.values() if p.due <= now]
        if due:
            self.consumer.resume([TopicPartition(p.topic, p.partition) for p in due])
        for p in due:
            key = (p.topic, p.partition)
            del self._waiting[key]
            self._resumed[key] = p
        return due

    def attempts_for(self, msg: Any) -> tuple[int, int] | None:
        """``(attempts made, first failure ms)`` if ``msg`` is a record coming back for a retry."""
        p = self._resumed.get((msg.topic(), msg.partition()))
        if p is None or p.offset != msg.offset():
            return None
        return p.attempt, p.first_failure_ms

    def settled(self, msg: Any) -> None:
        """The record was finally handled (or dead-lettered): forget its attempt count."""
        key = (msg.topic(), msg.partition())
        p = self._resumed.get(key)
        if p is not None and p.offset == msg.offset():
            del self._resumed[key]

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions left us: their waits are the new owner's business (it restarts at
        attempt 1 from the committed offset -- a bounded extra retry, never a skip)."""
        for tp in partitions:
            self._waiting.pop((tp.topic, tp.partition), None)
            self._resumed.pop((tp.topic, tp.partition), None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def next_due_in(self) -> float | None:
        """Seconds until the next retry is due (a poll timeout hint), None when nothing waits."""
        if not self._waiting:
            return None
        return max(0.0, min(p.due for p in self._waiting.values()) - self.clock())
