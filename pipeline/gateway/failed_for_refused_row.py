"""The relay's terminal sink: an outbox row the broker refused for good becomes a FAILED.

The gateway's :class:`~pipeline.outbox.terminal.TerminalSink`. When the relay makes a row
terminal (the broker refused it for good, e.g. too large), the local sender learns it like any
other failed send: a signed ``FAILED`` envelope with ``msgId = failed-<original msgId>`` (the id
the deadline FAILED and the DLQ reporter use, so a second copy is harmless), written to this
host's own inbox through the outbox in the transaction that marks the row FAILED. Nothing is
sent for a row the gateway itself originated (a FAILED or a receipt): a failure about a failure
would only loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.envelope.reasons import H_FROM, H_KIND, H_MSG_ID, H_TO, H_TRACE_ID
from pipeline.envelope.receipts import failed_receipt
from pipeline.host.outbound import GATEWAY_SUFFIX, Publisher
from pipeline.outbox.terminal import FailedRow

log = logging.getLogger(__name__)

RELAY_STAGE = "relay"


@dataclass(frozen=True, kw_only=True)
class RelayFailedSink:
    publisher: Publisher
    ttl_s: float = 86400.0

    def row_failed(self, session: Session, row: FailedRow) -> None:
        h = {k: v.decode("utf-8", "replace") for k, v in row.headers}
        sender, msg_id = h.get(H_FROM, ""), h.get(H_MSG_ID, "")
        if not sender or not msg_id or sender.endswith(GATEWAY_SUFFIX) or h.get(H_KIND) == "FAILED":
            log.error("outbox row %d FAILED (%s): no sender to tell", row.id, row.reason)
            return
        failed = failed_receipt(
            about=msg_id,
            recipient=h.get(H_TO, ""),
            sender=self.publisher.gateway_id,
            to=sender,
            reason=row.reason,
            error=row.error,
            stage=RELAY_STAGE,
            ttl_s=self.ttl_s,
            trace_id=h.get(H_TRACE_ID) or None,
        )
        self.publisher.stage(session, failed, to_host=self.publisher.host)
