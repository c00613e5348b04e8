"""The receipts an inbox takes about this host's own tracked sends (``INJECTED``, ``FAILED``).

A receipt settles the tracked send it is about -- a forward send or a SPAWN / STOP -- and is then
delivered to the sender like any message (docs/gateway.md, "The inject deadline", "The inject
journal"): exactly one ``FAILED`` per send (R-ACK-5), a late ``INJECTED`` said loudly, an
``uncertain`` one recorded as such. An ``INJECTED`` is taken only from the gateway of the host
the send went to, which alone can have injected it (``SIGNER_MISMATCH`` otherwise: dead-lettered,
nothing settled); a ``FAILED`` from any gateway, as the FAILED reporter is one consumer group
across the hosts. The state of every receipt's send in a batch is read ahead,
in the batch transaction, in one statement per tracked kind.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from pipeline.envelope import Envelope, Kind
from pipeline.envelope.reasons import SIGNER_MISMATCH
from pipeline.envelope.receipts import Receipt, read_receipt
from pipeline.errors import EnvelopeError
from pipeline.host import deadlines
from pipeline.host.inject_journal import STAGE_UNCERTAIN
from pipeline.runtime import Staged
from pipeline.runtime.ports import WARM_UP_ID

from .metrics import GatewayMetrics

log = logging.getLogger(__name__)

RECEIPT_KINDS = (Kind.INJECTED, Kind.FAILED)


class SenderReceipts:
    """Settles each receipt an inbox takes; the inbox handler holds what :meth:`take` keeps."""

    def __init__(self, *, tracked: Sequence[deadlines.Tracked], metrics: GatewayMetrics) -> None:
        self.tracked = tuple(tracked)  # the kinds of tracked send a receipt may settle
        self.metrics = metrics
        # the batch's receipts (by the receipt's msgId) and the state of the sends they are
        # about, read ahead in the batch transaction; a receipt not found here is read alone
        self._receipts: dict[str, Receipt] = {}
        self._states: Mapping[str, deadlines.Sent | None] = {}

    def read_ahead(self, conn: Connection, envelopes: Iterable[Envelope]) -> None:
        """The batch's receipts among ``envelopes`` (verified) and their sends' states, read in
        one statement per tracked kind (on PostgreSQL in the round trip of the batch's dedupe
        claim: ``deadlines.states_of``)."""
        self._receipts, self._states = {}, {}
        for env in envelopes:
            if env.kind not in RECEIPT_KINDS:
                continue
            try:
                self._receipts[env.msg_id] = read_receipt(env.kind.value, env.body)
            except EnvelopeError:
                continue  # ``take`` reads it again and refuses it as before
        if self._receipts:
            ids = [receipt.msg_id for receipt in self._receipts.values()]
            self._states = deadlines.states_of(conn, self.tracked, ids)

    def warm(self, session: Session) -> None:
        """Compile the settle and the state read (in the runtime's rolled-back warm-up)."""
        tx = Staged()
        tx.call_each(self._settle_answers, deadlines.Answer(WARM_UP_ID, True, ""))
        tx.flush(session)
        dict(deadlines.states_of(session.connection(), self.tracked, [WARM_UP_ID]))

    def take(
        self,
        env: Envelope,
        tx: Staged,
        read: Callable[[Callable[[Session], deadlines.Sent | None]], deadlines.Sent | None],
        signer_host: str,
    ) -> bool:
        """Settle the send ``env`` (a receipt signed by ``signer_host``) is about, in ``tx``;
        True: hold ``env`` for the sender, False: drop it (a ``FAILED`` the deadline already
        gave: one per send). ``read`` runs a read of its own for a receipt not read ahead.
        Raises ``EnvelopeError`` (``SIGNER_MISMATCH``) for an ``INJECTED`` about a send that
        went to another host than the signer."""
        ahead = self._receipts.pop(env.msg_id, None)
        receipt = ahead or read_receipt(env.kind.value, env.body)
        if ahead is not None and receipt.msg_id in self._states:
            sent = self._states[receipt.msg_id]
        else:
            sent = read(lambda s: deadlines.tracked_send(s, self.tracked, receipt.msg_id))
        state = None if sent is None else sent.state
        if env.kind == Kind.INJECTED and sent is not None and sent.host not in (None, signer_host):
            raise EnvelopeError(
                f"INJECTED about {receipt.msg_id}, a send to host {sent.host}, signed by host "
                f"{signer_host}: only the host a send went to injects it",
                reason=SIGNER_MISMATCH,
                context={"about": receipt.msg_id, "sent_to_host": sent.host,
                         "signer_host": signer_host},
            )  # fmt: skip
        if env.kind == Kind.FAILED and state == deadlines.FAILED:
            return False  # the deadline already reported it: exactly one FAILED per send
        if env.kind == Kind.INJECTED and receipt.stage == STAGE_UNCERTAIN:
            self._uncertain_injected(env, receipt.msg_id, state, tx)
            return True
        if env.kind == Kind.INJECTED and state == deadlines.FAILED:
            self._late_injected(env, receipt.msg_id, tx)
        answer = deadlines.Answer(receipt.msg_id, env.kind == Kind.INJECTED, receipt.reason)
        tx.call_each(self._settle_answers, answer)
        return True

    def _settle_answers(self, conn: Connection, answers: list[deadlines.Answer]) -> None:
        """The batch's consecutive receipts settled together (``deadlines.settle_answers``), on
        the batch's connection: a batch of receipts makes no ORM session for them."""
        deadlines.settle_answers(conn, self.tracked, answers)

    def _late_injected(self, env: Envelope, msg_id: str, tx: Staged) -> None:
        """The residual window of the forward path: a brief injected just before its deadline
        whose ``INJECTED`` was delayed (an outage) past the sender's ``FAILED``. The FAILED was
        wrong; say so loudly -- a warning, a metric, the tracked row marked ``late`` -- and hold
        the ``INJECTED`` for the sender too, so it learns the truth."""
        log.warning(
            "LATE INJECTED: %s reports brief %s injected AFTER its sender %s was told FAILED "
            "(the receipt was delayed past the deadline); the FAILED was wrong",
            env.sender, msg_id, env.to,
        )  # fmt: skip
        tx.call(functools.partial(deadlines.mark_late, kinds=self.tracked, msg_id=msg_id))
        tx.after_store(self.metrics.late_injected.inc)

    def _uncertain_injected(
        self, env: Envelope, msg_id: str, state: str | None, tx: Staged
    ) -> None:
        """The recipient's gateway died between deciding to inject this brief and recording it
        (its inject journal row was still open at its restart): it may have been injected. The
        tracked row becomes ``uncertain`` (from ``pending``: the one outcome; from ``failed``:
        the deadline's INJECT_TIMEOUT came first and may have been wrong) and the INJECTED is
        held for the sender, who reads "may have been injected"."""
        before = "failed" if state == deadlines.FAILED else "pending"
        log.warning(
            "UNCERTAIN INJECT: %s reports brief %s from %s may have been injected (it died "
            "mid-inject)%s",
            env.sender, msg_id, env.to,
            "; the INJECT_TIMEOUT already given may have been wrong" if before == "failed" else "",
        )  # fmt: skip
        tx.call(functools.partial(deadlines.mark_uncertain, kinds=self.tracked, msg_id=msg_id))
        tx.after_store(self.metrics.uncertain_injected.labels(before).inc)
