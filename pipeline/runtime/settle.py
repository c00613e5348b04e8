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
from .staging import Staged


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

    def decide_all(
        self,
        records: list[Record],
        ids: list[str | None],
        batch: Batch,
        claimed: set[str],
        now: int,
        *,
        releasing: str | None,
    ) -> None:
        """:meth:`decide` each record in order, skipping a partition a retry blocked.

        The common record (no quarantine to consult, a first delivery, no earlier failed
        attempt, the handler's ``Ack``) is settled here without the calls :meth:`decide` and
        :meth:`settle` make for it: per record they cost more than the handler's own work on a
        runtime that writes one row a record. What it leaves behind is the same."""
        blocked = batch.blocked
        if self.quarantine is not None:  # a key's quarantine is looked up per record
            for rec, msg_id in zip(records, ids, strict=True):
                if rec.tp not in blocked:
                    self.decide(rec, msg_id, batch, claimed, now, releasing=releasing)
            return
        staged, attempts = batch.staged, self.attempts
        next_offset, applied = batch.next_offset, batch.applied_ids
        acks = 0
        for rec, msg_id in zip(records, ids, strict=True):
            tp = rec.tp
            if tp in blocked:
                continue
            if attempts or (msg_id is not None and (msg_id not in claimed or msg_id in applied)):
                self.decide(rec, msg_id, batch, claimed, now, releasing=releasing)
                continue
            mark = staged.mark()
            outcome = self._handled(rec, staged)
            if not isinstance(outcome, Ack):
                self._not_acked(rec, msg_id, outcome, mark, batch, now)
                continue
            next_offset[tp] = rec.offset + 1
            if msg_id is not None:
                applied.add(msg_id)
            acks += 1
        if acks:
            batch.count("ack", acks)

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
        outcome = self._handled(rec, staged)
        if isinstance(outcome, Ack):  # the hot path: nothing to decide
            self.settle(rec, outcome, batch, msg_id, now)
            return
        self._not_acked(rec, msg_id, outcome, mark, batch, now)

    def _handled(self, rec: Record, staged: Staged) -> Outcome:
        try:
            outcome: Outcome = self.handler.handle(rec, staged)
        except Exception as exc:  # noqa: BLE001 - every handler error maps onto an outcome
            outcome = classify(exc)
        return outcome

    def _not_acked(
        self,
        rec: Record,
        msg_id: str | None,
        outcome: Outcome,
        mark: tuple[int, int, int],
        batch: Batch,
        now: int,
    ) -> None:
        """The handler did not ``Ack``: its staged writes go, the retry policy decides."""
        batch.staged.rollback(mark)  # a record that is not applied leaves no partial writes
        cfg = self.config
        attempt = 1
        if isinstance(outcome, Retry):
            attempt = self.attempts.failed(rec, now)
        decision = decide(
            outcome,
            attempt=attempt,
            policy=cfg.retry,
            ordered=cfg.ordered,
            keyed=rec.key is not None,
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
