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
from pipeline.failures.context import FailureContext
from pipeline.failures.dlq import dead_letter_headers
from pipeline.kafka.topics import TopicNames
from pipeline.runtime import Staged


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
