"""At-most-once batches whose offset commit is in flight: their effects wait, the loop goes on.

With ``RuntimeConfig.pipelined_commit`` a batch holding an ``AfterCommit`` effect (the forward
path's inject) sends its offsets asynchronously, like a pull batch, and waits here; the loop
polls and handles the next batches meanwhile. Its ``AfterCommit`` effects run only once a
commit covering each of its partitions is confirmed (librdkafka's ``on_commit``, served by the
loop's ``poll``): commit before inject holds, and the REPLYs of the next batch no longer queue
behind the broker's answer. Batches settle in the order they were handled, so their effects run
in that order too.

* **Confirmed**: a successful result at or past the batch's offset, for each of its partitions
  (a later batch's commit confirms an earlier one: the offset moved past both).
* **Refused**: an error at or past the batch's offset, other than the coordinator moving (which
  the async commits send again, ``AsyncCommits.retry``): nothing of the batch is injected, as
  after a failed synchronous commit (R-ACK-3: a visible loss, never a double).
* **Unanswered for ``SYNC_COMMIT_RETRY_S``**: refused (the synchronous commit's budget).
* **Before a rebalance moves partitions, and at close**, every batch still waiting is settled
  by one synchronous commit (:meth:`AwaitingCommit.settle`); a partition **lost** (no commit
  possible) refuses every batch that waits on it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from .batch import Batch, effect_failed
from .commits import COORDINATOR_MOVING_CODES, SYNC_COMMIT_RETRY_S, AsyncCommits
from .lanes import TP

log = logging.getLogger(__name__)


@dataclass
class _Waiting:
    batch: Batch
    offsets: dict[TP, int]  # the partitions not yet confirmed, and the offset each needs
    deadline: float
    refused: str | None = None


class AwaitingCommit:
    """The FIFO of at-most-once batches waiting for their commit (see the module docstring)."""

    def __init__(
        self,
        *,
        fault_after_commit: Callable[[int], None] | None = None,
        budget_s: float = SYNC_COMMIT_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fault_after_commit = fault_after_commit
        self.budget_s = budget_s
        self._clock = clock
        self._queue: deque[_Waiting] = deque()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def add(self, batch: Batch, offsets: dict[TP, int]) -> None:
        """A batch whose offsets were just sent asynchronously; its ``AfterStore`` effects
        have run, its ``AfterCommit`` ones wait here."""
        self._queue.append(_Waiting(batch, dict(offsets), self._clock() + self.budget_s))

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """A commit's result (librdkafka's ``on_commit``, beside ``AsyncCommits.on_commit``)."""
        for tp in partitions or []:
            error = err if err is not None else tp.error
            key = (tp.topic, tp.partition)
            for waiting in self._queue:
                want = waiting.offsets.get(key)
                if want is None or tp.offset < want:
                    continue  # an earlier batch's offset: says nothing of this one
                if error is None:
                    del waiting.offsets[key]
                elif waiting.refused is None and error.code() not in COORDINATOR_MOVING_CODES:
                    waiting.refused = error.str()

    def run_ready(self) -> None:
        """Run the effects of the batches at the head that are settled, in order."""
        now = self._clock()
        while self._queue:
            head = self._queue[0]
            if head.offsets and head.refused is None:
                if now < head.deadline:
                    return
                head.refused = f"no answer to the offset commit in {self.budget_s:g} s"
            self._queue.popleft()
            self._run(head)

    def _run(self, waiting: _Waiting) -> None:
        staged = waiting.batch.staged
        if waiting.refused is not None:
            log.error("offset commit failed, forward effects skipped: %s", waiting.refused)
            return
        if self.fault_after_commit is not None:
            self.fault_after_commit(staged.count_after_commit())
        staged.run_after_commit(on_error=effect_failed)

    def settle(self, consumer: Any, async_commits: AsyncCommits) -> None:
        """Before partitions move, and at close: commit every unconfirmed offset synchronously,
        then run (or skip, if refused) every waiting batch's effects."""
        if not self._queue:
            return
        result = async_commits.flush(consumer)
        for waiting in self._queue:
            if result.ok:
                waiting.offsets.clear()
            elif waiting.refused is None:
                waiting.refused = "; ".join(result.errors) or "the offset commit failed"
        self.run_ready()

    def lost(self, tps: set[TP]) -> None:
        """Partitions lost (nothing may be committed for them): every batch waiting on one of
        them is refused; the others wait on."""
        for waiting in self._queue:
            if waiting.refused is None and not tps.isdisjoint(waiting.offsets):
                waiting.refused = "its partitions were lost before the commit was confirmed"
        self.run_ready()

    def next_wait_s(self, wait_s: float) -> float:
        """How long the loop's poll may block: briefly while a batch waits, so its effects
        run soon after the answer is served (a served callback does not end a poll)."""
        return min(wait_s, POLL_WHILE_WAITING_S) if self._queue else wait_s


POLL_WHILE_WAITING_S = 0.002
