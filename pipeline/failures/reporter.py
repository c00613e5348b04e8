"""The FAILED reporter: every dead-lettered delivery becomes exactly one FAILED at its sender.

R-DLQ-4: "the caps must not become a new silent loss channel". The reporter is its own
consumer group (``<prefix>dlq-reporter``) on the DLQ. A dead letter is *eligible* when its
original ``kind`` expects delivery (SEND, ASK, SPAWN), it names a sender (``from``) and a
``msgId``, and its context says the envelope was **verified** -- a forged ``from`` on an unverified
record must not make us spam FAILED at an innocent sender.

Exactly-once effect, per dead letter, with a kill -9 at any point::

    emit FAILED (msgId = failed-<original msgId>)  -> crash here: re-emitted on restart with the
                                                      SAME msgId; the receiver's dedupe drops it
    insert reported row (unique original msgId)    -> crash here: redelivered, row found, skipped
    commit the DLQ offset

A second dead letter for the same original msgId (a replayed record that failed again) finds the
row and is skipped too: one FAILED per original message, ever.

A :class:`StagedFailedSink` (the gateway's signing sink) closes the first window instead: its
FAILED is an outbox row written in the SAME transaction as the reported row, so both exist or
neither does, and the host's relay ships it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from confluent_kafka import Consumer, KafkaException
from sqlalchemy import BigInteger, Column, String, Table, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.envelope.receipts import failed_msg_id
from pipeline.errors import EnvelopeError
from pipeline.runtime.offsets import raise_if_offsets_lost
from pipeline.store import metadata
from pipeline.support.clock import now_ms
from pipeline.tracing import FAILED_REPORT, TRACING

from .dlq import DeadLetterView, read_dead_letter
from .metrics import FailureMetrics

log = logging.getLogger(__name__)

DELIVERY_KINDS = frozenset({"SEND", "ASK", "SPAWN"})

reported_table = Table(
    "fleet_failed_reported",
    metadata,
    Column("original_msg_id", String(255), primary_key=True),  # the dedupe: one FAILED per msgId
    Column("failed_msg_id", String(300), nullable=False),
    Column("sender", String(512), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("dead_letter_ref", String(512), nullable=False),
    Column("reported_ms", BigInteger, nullable=False),
)


class FailedSink(Protocol):
    """Port: deliver one FAILED to ``sender``; return only once it is durably published."""

    def emit_failed(
        self,
        *,
        original_msg_id: str,
        sender: str,
        reason: str,
        error: str,
        dead_letter: DeadLetterView,
    ) -> None: ...


@runtime_checkable
class StagedFailedSink(Protocol):
    """Port: stage one FAILED in ``session`` (an outbox row); the caller commits it together with
    the reported row. Returns False when the FAILED cannot be routed (nothing staged; the sink
    logs it loudly and the dead letter stays in the DLQ for its owner)."""

    def stage_failed(
        self,
        session: Session,
        *,
        original_msg_id: str,
        sender: str,
        reason: str,
        error: str,
        dead_letter: DeadLetterView,
    ) -> bool: ...


class _Unroutable(Exception):
    """The staged sink could not route this FAILED: roll the reported row back."""


def eligible(view: DeadLetterView) -> bool:
    return view.kind in DELIVERY_KINDS and bool(view.sender) and bool(view.msg_id) and view.verified


class FailedReporter:
    """Consumes the DLQ in its own group and reports eligible dead letters (see module doc)."""

    def __init__(
        self,
        *,
        consumer: Consumer,
        engine: Engine,
        sink: FailedSink | StagedFailedSink,
        metrics: FailureMetrics | None = None,
        group: str = "dlq-reporter",
    ) -> None:
        self.consumer = consumer
        self.group = group
        self.engine = engine
        self.sink = sink
        self.metrics = metrics

    def handle(self, view: DeadLetterView) -> bool:
        """Report ``view`` if eligible and not yet reported; True when a FAILED was emitted."""
        if not eligible(view):
            return False
        original = str(view.msg_id)
        with self.engine.connect() as conn:
            done = conn.execute(
                select(reported_table.c.original_msg_id).where(
                    reported_table.c.original_msg_id == original
                )
            ).first()
        if done is not None:
            return False
        if TRACING.on:  # the FAILED staged next in this thread is its child
            TRACING.event(FAILED_REPORT, trace_id=view.header("traceId") or "", msg_id=original)
        sink, sender, error = self.sink, str(view.sender), str(view.context.get("error", ""))
        if not isinstance(sink, StagedFailedSink):
            sink.emit_failed(
                original_msg_id=original,
                sender=sender,
                reason=view.reason,
                error=error,
                dead_letter=view,
            )
        try:
            with Session(self.engine) as session, session.begin():
                session.execute(
                    insert(reported_table).values(
                        original_msg_id=original,
                        failed_msg_id=failed_msg_id(original),
                        sender=sender,
                        reason=view.reason[:64],
                        dead_letter_ref=view.ref,
                        reported_ms=now_ms(),
                    )
                )
                if isinstance(sink, StagedFailedSink) and not sink.stage_failed(
                    session,
                    original_msg_id=original,
                    sender=sender,
                    reason=view.reason,
                    error=error,
                    dead_letter=view,
                ):
                    raise _Unroutable  # no row: a replayed dead letter may be reported later
        except IntegrityError:
            return False  # another reporter instance recorded it first; our emit had the same id
        except _Unroutable:
            return False
        if self.metrics is not None:
            self.metrics.failed_reported.inc()
        return True

    def run(
        self,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        idle_exit_s: float | None = None,
        poll_s: float = 0.5,
    ) -> int:
        """Poll, report, commit each offset after its record is settled. Returns FAILED emitted.

        ``idle_exit_s``: return after that long with nothing to read (batch runs and tests).
        """
        emitted = 0
        idle_since = time.monotonic()
        while not should_stop():
            msg = self.consumer.poll(poll_s)
            if msg is None:
                if not self.consumer.assignment():
                    # still joining (a killed member holds its partitions until its session
                    # times out): idle time only counts once we own something
                    idle_since = time.monotonic()
                elif idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    break
                continue
            idle_since = time.monotonic()
            err = msg.error()
            if err is not None:
                raise_if_offsets_lost(self.consumer, msg, self.group)  # dead letters deleted
                if err.fatal():
                    raise KafkaException(err)
                log.warning("DLQ consume error (librdkafka retries it): %s", err.str())
                continue
            emitted += self._settle(msg)
            # synchronous: the offset moves only after the record's effect is recorded
            self.consumer.commit(message=msg, asynchronous=False)
        return emitted

    def _settle(self, msg: Any) -> int:
        try:
            view = read_dead_letter(msg)
        except EnvelopeError as exc:
            # not written by a DeadLetterWriter: nothing we can correlate; the DLQ owner sees it
            log.warning("DLQ record without dead-letter context skipped: %s", exc)
            return 0
        return 1 if self.handle(view) else 0
