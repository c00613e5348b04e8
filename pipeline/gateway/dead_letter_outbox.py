"""Dead letters (the failed record itself, bound for the DLQ topic) staged as outbox rows.

Not a ``FAILED``: telling the sender is the DLQ reporter's job (``failed_for_dead_letter.py``).
A dead letter from the gateway goes through the outbox in the batch's own transaction, so a
dead-lettered record and the offset commit past it can never disagree: the dead letter is
durable in the store before the commit, and the relay ships it to ``fleet.dlq`` even if the
broker is away right now. Format: ``pipeline.failures.dlq`` (original headers and body kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline import outbox
from pipeline.failures.dlq import dead_letter_headers
from pipeline.host.held import HeldStore, held_table
from pipeline.kafka.topics import TopicNames
from pipeline.record_headers import unpack_headers
from pipeline.runtime import Record, Staged
from pipeline.runtime.context import FailureContext
from pipeline.support.clock import now_ms


@dataclass(frozen=True, kw_only=True)
class OutboxDeadLetterSink:
    """The runtime's ``DeadLetterSink`` for the gateway: stages the DLQ record as an outbox row
    (``verified`` comes from the one rule in :class:`FailureContext`)."""

    topics: TopicNames
    gateway: str
    group: str | None = None

    def stage(self, tx: Staged, failure: FailureContext) -> None:
        rec = failure.record
        headers = dead_letter_headers(failure, gateway=self.gateway, group=self.group)
        tx.call(lambda s: self.write(s, rec.key, headers, rec.value))

    def write(self, session: Session, key: bytes | None, headers: Any, value: bytes | None) -> None:
        outbox.write(
            session,
            topic=self.topics.dlq,
            key=key,
            value=value,
            headers=headers,
            branch_key=f"dlq>{self.gateway}",
        )


def held_record(row: Any) -> Record:
    """A held row as the record it arrived as (headers and body kept verbatim)."""
    return Record(
        topic=row.topic or "",
        partition=-1,
        offset=-1,
        key=row.recipient.encode(),
        value=bytes(row.body),
        headers=tuple(unpack_headers(row.headers)),
        timestamp_ms=row.ts_ms,
    )


def dead_letter_held(
    session: Session, sink: OutboxDeadLetterSink, rows: Sequence[Any], *, reason: str, error: str
) -> int:
    """Dead-letter held rows with ``reason`` and delete them, in ``session``'s transaction."""
    now = now_ms()
    tx = Staged()
    for row in rows:
        sink.stage(
            tx,
            FailureContext(
                record=held_record(row),
                reason=reason,
                error=error.format(recipient=row.recipient),
                first_failure_ms=now,
                last_failure_ms=now,
            ),
        )
    tx.flush(session)
    HeldStore.delete_ids(session, [r.id for r in rows])
    return len(rows)


def undrained(session: Session, recipient: str) -> list[Any]:
    t = held_table
    query = select(t).where(t.c.recipient == recipient, t.c.drained_at_ms.is_(None))
    return list(session.execute(query.order_by(t.c.id)))
