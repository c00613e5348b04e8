"""The DLQ reporter's signed sink: a reported dead letter becomes a FAILED to its sender's host.

A signed ``FAILED`` envelope, written through the reporting host's outbox (the plain, unsigned
sink for tests is ``pipeline/failures/failed_to_topic.py``). R-DLQ-4: "a DLQ consumer reports
every dead-lettered forward brief back to its sender as FAILED". The reporter
(``pipeline.failures.reporter``) decides *whether*; this decides *how*:

* ``from`` = ``<reporting host>._gateway`` (valid exactly when that host signs it), ``to`` = the
  brief's sender (header ``from``), key = ``to``, signed for the inbox of the sender's host;
* ``msgId`` = ``failed-<original msgId>``: the sender's gateway uses the same id for its own
  deadline FAILED, so its dedupe, its forward-tracking row and its unique held row make any
  second copy harmless; ``traceId`` is kept from the brief;
* body = the Avro ``failed`` record: the original msgId, recipient, the dead letter's reason and
  error, ``stage="dlq"``.

The sender's host is the host that **signed** the brief: its ``keyId`` names exactly one trusted
key, hence one host. Only when that key is not in this host's trust store does the roster the
gateway mirrors into the store answer (its last known host, even if the presence lapsed: a
FAILED waiting in a down host's inbox is better than none).

The row is staged in the reporter's own transaction (beside its ``reported`` dedupe row) and
shipped by the host's relay -- the same store the host's gateway relay drains.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.envelope import TrustStore
from pipeline.envelope.reasons import H_KEY_ID, H_TRACE_ID
from pipeline.envelope.receipts import failed_receipt
from pipeline.failures.dlq import DeadLetterView
from pipeline.host import roster_cache
from pipeline.host.outbound import Publisher
from pipeline.record import key_text

log = logging.getLogger(__name__)

DLQ_STAGE = "dlq"


@dataclass(frozen=True, kw_only=True)
class EnvelopeFailedSink:
    """The reporter's ``StagedFailedSink``: one signed FAILED per dead letter, via the outbox."""

    publisher: Publisher
    trust: TrustStore
    ttl_s: float = 86400.0

    def sender_host(self, session: Session, dead_letter: DeadLetterView) -> str | None:
        """The host that signed the brief (trust store by ``keyId``), else the roster's answer."""
        key_id = dead_letter.header(H_KEY_ID)
        trusted = self.trust.lookup(key_id) if key_id else None
        if trusted is not None:
            return trusted.host
        sender = dead_letter.sender
        entry = roster_cache.lookup(session, sender) if sender else None
        return None if entry is None else entry.host

    def stage_failed(
        self,
        session: Session,
        *,
        original_msg_id: str,
        sender: str,
        reason: str,
        error: str,
        dead_letter: DeadLetterView,
    ) -> bool:
        host = self.sender_host(session, dead_letter)
        if host is None:
            log.error(
                "FAILED for %s not sent: no trusted key %r and no roster entry for %s "
                "(the dead letter %s stays in the DLQ)",
                original_msg_id,
                dead_letter.header(H_KEY_ID),
                sender,
                dead_letter.ref,
            )
            return False
        failed = failed_receipt(
            about=original_msg_id,
            recipient=dead_letter.header("to") or key_text(dead_letter.key),
            sender=self.publisher.gateway_id,
            to=sender,
            reason=reason,
            error=error,
            stage=DLQ_STAGE,
            ttl_s=self.ttl_s,
            trace_id=dead_letter.header(H_TRACE_ID) or None,
        )
        self.publisher.stage(session, failed, to_host=host)
        return True
