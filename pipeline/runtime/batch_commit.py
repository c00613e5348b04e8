"""A batch's offset commit (step 3 in ``loop.py``): asynchronous, or synchronous when it must.

Synchronous when an at-most-once effect waits for it (forward path: commit before inject), or
asynchronous with the effect waiting for the answer (``RuntimeConfig.pipelined_commit``:
``send_awaiting``); else asynchronous (pull path: a lost commit redelivers what dedupe absorbs). An offset is committed
only when every earlier record of its partition is durable or deliberately given up; a partition
blocked by a retry commits up to the blocked record, with its attempts as metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pipeline.errors import FencedError

from .attempts import Attempts
from .awaiting_commit import AwaitingCommit
from .batch import Batch, effect_failed
from .commits import AsyncCommits, commit_while_coordinator_moves
from .config import RuntimeConfig
from .inflight import Dispatcher
from .lanes import TP
from .metrics import RuntimeMetrics
from .pauses import Pauses
from .staging import AckMode

log = logging.getLogger(__name__)


class BatchCommit:
    """Commits a batch's handled prefix of each partition; see :meth:`commit`."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        async_commits: AsyncCommits,
        attempts: Attempts,
        pauses: Pauses,
        inflight: Dispatcher | None,
        metrics: RuntimeMetrics | None,
        fault_after_commit: Callable[[int], None] | None,
    ) -> None:
        self.config = config
        self.async_commits = async_commits
        self.attempts = attempts
        self.pauses = pauses
        self.inflight = inflight
        self.metrics = metrics
        # Fault injection for crash tests (wired only by an entry point, never by default):
        # called after a successful commit, before the batch's after-commit effects.
        self.fault_after_commit = fault_after_commit

    def _offsets(self, batch: Batch) -> tuple[dict[TP, int], dict[TP, str]]:
        offsets, marks = self.attempts.retry_marks(batch)
        if self.inflight is not None:  # inflight: never past a record queued or running
            offsets = self.inflight.committable(offsets, batch.blocked)
        return offsets, marks

    def send_awaiting(self, consumer: Any, batch: Batch, awaiting: AwaitingCommit) -> None:
        """A pipelined at-most-once batch: its offsets go asynchronously, its ``AfterStore``
        follow-ups run now, its ``AfterCommit`` ones wait in ``awaiting`` for the commit's
        answer while the loop goes on (``runtime/awaiting_commit.py``)."""
        offsets, marks = self._offsets(batch)
        if offsets:
            self.async_commits.commit(consumer, offsets, marks)
        batch.staged.run_effects(committed=False, on_error=effect_failed)
        awaiting.add(batch, offsets)

    def commit(self, consumer: Any, batch: Batch, *, sync: bool = False) -> bool:
        """Commit the batch's offsets: synchronously when an at-most-once effect waits for it
        (forward path: commit before inject), else asynchronously (pull path: a lost commit
        redelivers what dedupe absorbs). False when a synchronous commit failed (retries are
        scheduled); raises :class:`FencedError` when fenced."""
        cfg = self.config
        offsets, marks = self._offsets(batch)
        if not sync and batch.staged.ack_mode() is AckMode.AT_LEAST_ONCE:
            if offsets:
                self.async_commits.commit(consumer, offsets, marks)
            return True
        result, retries = commit_while_coordinator_moves(consumer, offsets, marks)
        if retries:
            if self.metrics:
                self.metrics.commit_retries.labels(cfg.group_id).inc(retries)
            if result.ok:
                log.info(
                    "offset commit went through on try %d (the coordinator moved)", retries + 1
                )
        if not result.ok:
            if self.metrics:
                self.metrics.commit_failures.labels(cfg.group_id).inc()
            if result.fences(static_member=cfg.instance_id is not None):
                raise FencedError(
                    f"group {cfg.group_id} member {cfg.instance_id or '(dynamic)'} was "
                    f"fenced: another gateway with the same id took over, or this one "
                    f"stalled past its session timeout. Nothing from this batch is "
                    f"injected. {'; '.join(result.errors)}"
                )
            log.error("offset commit failed, forward effects skipped: %s", result.errors)
            batch.staged.run_effects(committed=False, on_error=effect_failed)
            # a blocked record must still be sought back to: the position is past it
            self.pauses.schedule(consumer, batch)
            return False
        self.async_commits.superseded(offsets)
        if self.fault_after_commit is not None:
            self.fault_after_commit(batch.staged.count_after_commit())
        return True
