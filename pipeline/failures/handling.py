"""The failure side of one consumer, composed for the runtime: park, dead-letter, quarantine,
release (seed 001 scenario 3). The runtime decides WHEN (see ``docs/failures.md``, "Wiring");
this object does WHAT, in the order that loses nothing:

1. ``dead_letter``: the DLQ write blocks until the broker confirmed it, THEN the quarantine row
   goes into the caller's transaction, THEN the caller commits the offset. A crash before the DB
   commit re-consumes the record and writes a second dead letter with the same msgId (benign:
   the reporter and replays dedupe on msgId); a crash after it finds the key quarantined.
2. ``park``: in the caller's transaction, then the offset commit; idempotent on redelivery.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from .dlq import DeadLetterWriter
from .metrics import FailureMetrics
from .outcomes import DeadLetter, Quarantine
from .quarantine import QuarantineStore, Scope
from .records import RecordCopy, key_text


class FailureHandling:
    """Dead-letter writer + quarantine store + metrics for one consumer group."""

    def __init__(
        self,
        *,
        group: str,
        writer: DeadLetterWriter,
        quarantine: QuarantineStore,
        metrics: FailureMetrics | None = None,
    ) -> None:
        self.group = group
        self.writer = writer
        self.quarantine = quarantine
        self.metrics = metrics

    def scope(self, topic: str) -> Scope:
        return Scope(self.group, topic)

    def is_parked_key(self, msg: Any) -> bool:
        """True when ``msg``'s key is quarantined: the runtime must :meth:`park` it, not handle it.
        Keyless records have no per-key order, so they are never parked."""
        key = msg.key()
        return key is not None and self.quarantine.is_quarantined(
            self.scope(msg.topic()), key_text(key)
        )

    def park(self, session: Session, msg: Any) -> int:
        rec = RecordCopy.from_message(msg)
        return self.quarantine.park(session, self.scope(rec.topic), key_text(rec.key), rec)

    def dead_letter(
        self,
        session: Session,
        msg: Any,
        outcome: DeadLetter | Quarantine,
        *,
        attempts: int,
        first_failure_ms: int,
        verified: bool,
    ) -> str:
        """Write ``msg`` to the DLQ (blocking); quarantine its key when the outcome says so and
        it has a key. Returns the dead letter's ref. Commit ``session``, then the offset."""
        rec = RecordCopy.from_message(msg)
        quarantine = isinstance(outcome, Quarantine) and rec.key is not None
        partition, offset = self.writer.send(
            topic=rec.topic,
            partition=rec.partition,
            offset=rec.offset,
            timestamp_ms=rec.timestamp_ms,
            key=rec.key,
            headers=rec.headers,
            value=rec.value,
            reason=outcome.reason,
            error=outcome.error,
            attempts=attempts,
            first_failure_ms=first_failure_ms,
            last_failure_ms=int(time.time() * 1000),
            verified=verified,
            quarantined=quarantine,
        )
        ref = f"{self.writer.topic}:{partition}:{offset}"
        if quarantine:
            self.quarantine.quarantine(
                session,
                self.scope(rec.topic),
                key_text(rec.key),
                reason=outcome.reason,
                dead_letter_ref=ref,
                record=rec,
            )
        if self.metrics is not None:
            self.metrics.dead_lettered(outcome.reason)
        return ref
