"""Dead letters from the gateway go through the outbox, in the batch's own transaction.

So a dead-lettered record and the offset commit past it can never disagree: the dead letter is
durable in the store before the commit, and the relay ships it to ``fleet.dlq`` even if the
broker is away right now. Format: ``pipeline.failures.dlq`` (original headers and body kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from pipeline import outbox
from pipeline.failures.dlq import dead_letter_headers
from pipeline.failures.retry import AUTHENTICITY_FAILURES
from pipeline.kafka.topics import TopicNames
from pipeline.runtime import Record, Staged


@dataclass(frozen=True, kw_only=True)
class OutboxDeadLetterSink:
    """The runtime's ``DeadLetterSink``: stages the DLQ record as an outbox row."""

    topics: TopicNames
    gateway: str
    group: str | None = None

    def stage(
        self,
        tx: Staged,
        record: Record,
        *,
        reason: str,
        error: str,
        attempts: int,
        first_failure_ms: int,
        last_failure_ms: int,
    ) -> None:
        key, value = record.key, record.value
        headers = dead_letter_headers(
            record.headers,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            timestamp_ms=record.timestamp_ms,
            reason=reason,
            error=error,
            attempts=attempts,
            first_failure_ms=first_failure_ms,
            last_failure_ms=last_failure_ms,
            gateway=self.gateway,
            group=self.group,
            # the envelope was authentic unless verification itself failed: the FAILED reporter
            # must never answer a forged `from`
            verified=reason not in AUTHENTICITY_FAILURES,
        )
        tx.call(lambda s: self.write(s, key, headers, value))

    def write(self, session: Session, key: bytes | None, headers: Any, value: bytes | None) -> None:
        outbox.write(
            session,
            topic=self.topics.dlq,
            key=key,
            value=value,
            headers=headers,
            branch_key=f"dlq>{self.gateway}",
        )
