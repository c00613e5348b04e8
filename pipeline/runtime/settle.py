"""Each record of a batch, decided and settled in partition order (step 1 in ``loop.py``).

Parked if its key is quarantined; dropped as a duplicate only once the handler's ``verify``
stage passed (a tampered copy is dead-lettered, never taken for a duplicate); else the handler
stages its writes and returns an outcome, and :func:`pipeline.runtime.decide.decide` says what
happens: ``Ack`` applies it, ``Retry`` blocks the rest of its partition for this batch, a spent
retry budget or a refusal becomes a dead letter (and a quarantined key in ordered flows).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from sqlalchemy.orm import Session

from pipeline.record import Record

from .attempts import Attempts
from .batch import Batch
from .config import RuntimeConfig
from .context import FailureContext, Tries
from .decide import classify, decide
from .metrics import RuntimeMetrics
from .outcomes import Ack, DeadLetter, Outcome, Quarantine, Retry
from .ports import DeadLetterSink, Handler, QuarantinePort


def _park(q: QuarantinePort, scope: str, key: str, rec: Record, session: Session) -> None:
    q.park(session, scope, key, rec)


def _quarantine(
    q: QuarantinePort, scope: str, key: str, reason: str, ref: str, session: Session
) -> None:
    q.quarantine(session, scope, key, reason, ref)


class Settler:
    """Decides what each record of a batch becomes and stages it into the batch."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        handler: Handler,
        verify: Callable[[Record], DeadLetter | None] | None,
        dead_letters: DeadLetterSink,
        quarantine: QuarantinePort | None,
        is_quarantined: Callable[[str, str], bool],
        attempts: Attempts,
        metrics: RuntimeMetrics | None,
    ) -> None:
        self.config = config
        self.handler = handler
        self.verify = verify
        self.dead_letters = dead_letters
        self.quarantine = quarantine
        self._is_quarantined = is_quarantined
        self.attempts = attempts
        self.metrics = metrics

    def decide(
        self,
        rec: Record,
        msg_id: str | None,
        batch: Batch,
        claimed: set[str],
        now: int,
        *,
        releasing: str | None,
    ) -> None:
        cfg = self.config
        if self.quarantine is not None:
            key = rec.key_str
            if (
                key is not None
                and key != releasing
                and (key in batch.quarantined or self._is_quarantined(cfg.dedupe_scope, key))
            ):
                quarantine, scope = self.quarantine, cfg.dedupe_scope
                batch.staged.call(functools.partial(_park, quarantine, scope, key, rec))
                batch.next_offset[rec.tp] = rec.offset + 1
                batch.count("parked")
                return
        if msg_id is not None and (msg_id not in claimed or msg_id in batch.applied_ids):
            # Only a record that verifies may be dropped as a duplicate: a tampered copy of an
            # applied message is a dead letter with its reason, never a silent dedupe hit.
            refused = self.verify(rec) if self.verify is not None else None
            if refused is None:
                batch.next_offset[rec.tp] = rec.offset + 1
                batch.count("duplicate")
                if self.metrics:
                    self.metrics.dedupe_hits.labels(cfg.group_id).inc()
                return
            self.settle(rec, refused, batch, None, now)
            return
        staged = batch.staged
        mark = staged.mark()
        try:
            outcome: Outcome = self.handler.handle(rec, staged)
        except Exception as exc:  # noqa: BLE001 - every handler error maps onto an outcome
            outcome = classify(exc)
        if isinstance(outcome, Ack):  # the hot path: nothing to decide
            self.settle(rec, outcome, batch, msg_id, now)
            return
        staged.rollback(mark)  # a record that is not applied leaves no partial writes
        key = rec.key_str
        attempt = 1
        if isinstance(outcome, Retry):
            attempt = self.attempts.failed(rec, now)
        decision = decide(
            outcome, attempt=attempt, policy=cfg.retry, ordered=cfg.ordered, keyed=key is not None
        )
        if isinstance(decision, Retry):
            batch.blocked[rec.tp] = (rec.offset, decision.delay_s or 0.0)
            batch.count("retry")
            return
        self.settle(rec, decision, batch, msg_id, now)

    def settle(
        self,
        rec: Record,
        outcome: Ack | DeadLetter | Quarantine,
        batch: Batch,
        msg_id: str | None,
        now: int,
    ) -> None:
        batch.next_offset[rec.tp] = rec.offset + 1
        att_info = self.attempts.settled(rec)
        if isinstance(outcome, Ack):
            if msg_id is not None:
                batch.applied_ids.add(msg_id)
            batch.count("ack")
            return
        scope = self.config.dedupe_scope
        key = rec.key_str
        tries = att_info or Tries(attempts=1, first_failure_ms=now, last_failure_ms=now)
        quarantine = (
            isinstance(outcome, Quarantine) and self.quarantine is not None and key is not None
        )
        self.dead_letters.stage(
            batch.staged,
            FailureContext(
                record=rec,
                reason=outcome.reason,
                error=outcome.error,
                quarantined=quarantine,
                **tries,
            ),
        )
        if quarantine and self.quarantine is not None and key is not None:
            batch.staged.call(
                functools.partial(_quarantine, self.quarantine, scope, key, outcome.reason, rec.ref)
            )
            batch.quarantined.add(key)
            batch.count("quarantine")
        else:
            batch.count("dead_letter")
