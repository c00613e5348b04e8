"""A member's partitions coming and going: librdkafka's assign, revoke and lost callbacks.

At assignment, offsets lost to retention are refused (R-FAIL-7, never a silent skip),
a partition never committed whose log was trimmed is reported, the retry counts a previous owner
committed are taken over, and quarantine state is re-read. At a revoke, steps still in flight
end (bounded) and commit, and the asynchronous commits are confirmed (a pipelined at-most-once
batch's effects then run: ``awaiting_commit.py``), before the partitions go. A lost partition
commits nothing more, and the pipelined batches waiting on it run no effect.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from .attempts import Attempts
from .awaiting_commit import AwaitingCommit
from .commits import AsyncCommits
from .config import RuntimeConfig
from .fencing import member_id
from .inflight import Dispatcher
from .lanes import TP
from .metrics import RuntimeMetrics
from .offsets import find_lost_offsets, lost_error
from .pauses import Pauses
from .quarantine_gate import Processes, QuarantineGate

log = logging.getLogger(__name__)


class Rebalance:
    """The partitions assigned to this member, and what happens as they come and go."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        consumer: Callable[[], Any],
        async_commits: AsyncCommits,
        attempts: Attempts,
        awaiting: AwaitingCommit | None = None,
        pauses: Pauses,
        gate: QuarantineGate,
        inflight: Dispatcher | None,
        metrics: RuntimeMetrics | None,
        process: Processes,
    ) -> None:
        self.config = config
        self._consumer = consumer  # the current client: a re-join replaces it
        self.async_commits = async_commits
        self.awaiting = awaiting  # pipelined at-most-once batches, waiting for their commit
        self.attempts = attempts
        self.pauses = pauses
        self.gate = gate
        self.inflight = inflight
        self.metrics = metrics
        self.process = process
        self.assigned: set[TP] = set()
        self.member_id: str | None = None  # the client's member id at its last assignment

    def count(self, kind: str) -> None:
        if self.metrics:
            self.metrics.rebalances.labels(self.config.group_id, kind).inc()

    def on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        consumer = self._consumer()
        refuse_lost_offsets(
            consumer,
            self.config.group_id,
            partitions,
            metrics=self.metrics,
            attempts=self.attempts,
        )
        # librdkafka keeps an application pause across a revoke: a partition paused here before
        # it moved away would come back paused forever (we forgot it). Assigned = unpaused.
        with contextlib.suppress(Exception):
            consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in partitions])
        self.assigned.update((tp.topic, tp.partition) for tp in partitions)
        self.member_id = member_id(consumer)
        self.gate.refresh(consumer, self.assigned, self.pauses.paused)
        self.count("assign")

    def forget(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned -= gone
        self.async_commits.forget(gone)
        self.pauses.forget(gone)
        self.attempts.forget(gone)

    def on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        # Forward batches commit synchronously before the next poll; pull batches may have an
        # async commit in flight (flushed below); steps still in flight end (bounded) and commit
        # before the partition goes.
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self.settle_inflight(revoked)
        if self.awaiting:  # every waiting batch's commit confirmed, then its effects
            self.awaiting.settle(self._consumer(), self.async_commits)
        # the pull path's async commits of these partitions, confirmed before they move
        result = self.async_commits.flush(self._consumer(), revoked)
        if not result.ok:
            log.warning("commit on revoke failed (the new owner re-reads): %s", result.errors)
        self.forget(partitions)
        self.count("revoke")

    def on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if self.inflight is not None:  # inflight: lost, not revoked -- nothing may be committed
            self.inflight.forget({(tp.topic, tp.partition) for tp in partitions})
        if self.awaiting:
            self.awaiting.lost({(tp.topic, tp.partition) for tp in partitions})
        self.forget(partitions)

    def settle_inflight(self, tps: set[TP]) -> None:
        """Revoke rule: await the partitions' running steps (bounded), process and commit what
        finished, give up the rest (their offsets stay uncommitted)."""
        if self.inflight is None or not tps:
            return
        done = self.inflight.revoke(tps)
        if done:
            self.process(sorted(done, key=lambda r: (r.tp, r.offset)))
        self.inflight.forget(tps)
        self.count("lost")


def refuse_lost_offsets(
    consumer: Any,
    group: str,
    partitions: list[TopicPartition],
    *,
    metrics: RuntimeMetrics | None,
    attempts: Attempts,
) -> None:
    """R-FAIL-7, never a silent skip: with ``auto.offset.reset=earliest`` (which a
    brand-new group needs) librdkafka would jump a committed offset that fell off retention
    to the log start without a word. Checked at assignment: a lost range is counted, logged
    with its numbers and raised (``OffsetsLostError`` out of ``poll``; a gateway exits 3).
    A partition this group never committed but whose log no longer starts at 0 is reported
    too (ERROR line, the metric) and not refused: Kafka cannot tell a new group from one
    that died before its first commit, and a new group must be able to start.
    A check the broker cannot answer now is logged and skipped - the assignment goes on."""
    try:
        lost = find_lost_offsets(consumer, group, partitions, timeout_s=5.0)
        committed = consumer.committed(
            [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=5.0
        )
        attempts.continue_retries(committed)
        unread = [(tp, low) for tp, low in _never_committed_starts(consumer, committed) if low > 0]
    except Exception as exc:  # noqa: BLE001 - a broker blip must not fail the assignment
        log.warning("could not check %s for offsets lost to retention: %s", partitions, exc)
        return
    for tp, low in unread:
        if metrics:
            metrics.offsets_lost.labels(group).inc(low)
        log.error(
            "group %r %s[%d]: never committed, and the log starts at %d: %d offset(s) were "
            "deleted before group %r read them (a new group, or one that died before its "
            "first commit)",
            group, tp.topic, tp.partition, low, low, group,
        )  # fmt: skip
    for rng in lost:
        if metrics:
            metrics.offsets_lost.labels(group).inc(rng.lost)
        log.error("%s", lost_error(rng))
    if lost:
        raise lost_error(lost[0])


def _never_committed_starts(
    consumer: Any, committed: list[TopicPartition]
) -> list[tuple[TopicPartition, int]]:
    out = []
    for tp in committed:
        if tp.offset < 0:
            low, _high = consumer.get_watermark_offsets(tp, timeout=5.0, cached=False)
            out.append((tp, int(low)))
    return out
