"""The saga orchestrator: one SQL record per saga, commands out through the outbox (R-SAGA-1).

Every transition happens in the caller's transaction, reading the record ``FOR UPDATE`` and
writing the next command/event with :func:`pipeline.outbox.write` -- state and message commit
together or not at all. A reply that does not match the record's current ``(step, phase,
attempt)`` is stale (a redelivery, a superseded attempt) and changes nothing, so replies can
arrive any number of times. Forward: step 1..n; a failure at step k compensates k-1 ... 1 in
reverse (approval steps hold nothing to undo). A failed compensation is sent again after its
definition's backoff (``deadline_ms`` holds when; :meth:`SagaOrchestrator.tick` sends it); failing
``max_compensation_attempts`` times moves the saga to ``HUMAN`` with its full history. An
approval waits until its deadline; ``tick`` then emits ``approval.expired`` and compensates what
was held (scenario 6).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from pipeline.errors import ConfigError
from pipeline.outbox import write
from pipeline.reasons import Saga

from .metrics import SagaMetrics
from .saga_model import Command, Phase, SagaDefinition, SagaState, step_key
from .saga_record import SagaRecord, load, save
from .saga_tables import saga
from .saga_topics import SagaTopics


class SagaOrchestrator:
    """Drives sagas of the given definitions (see the module docstring)."""

    def __init__(
        self,
        definitions: Iterable[SagaDefinition],
        *,
        topics: SagaTopics,
        clock: Callable[[], float] = time.time,
        metrics: SagaMetrics | None = None,
    ) -> None:
        self.definitions = {d.name: d for d in definitions}
        self.topics = topics
        self.clock = clock
        self.metrics = metrics

    def _now(self) -> int:
        return int(self.clock() * 1000)

    def _definition(self, rec: SagaRecord) -> SagaDefinition:
        d = self.definitions.get(rec.definition)
        if d is None:
            raise ConfigError(
                f"saga {rec.saga_id}: unknown definition {rec.definition!r}",
                reason=Saga.SAGA_DEFINITION_INVALID,
            )
        return d

    # -- entry points -------------------------------------------------------------------------
    def start(
        self, session: Session, saga_id: str, definition: str, payload: dict[str, Any]
    ) -> None:
        if definition not in self.definitions:
            raise ConfigError(
                f"unknown saga definition {definition!r}",
                reason=Saga.SAGA_DEFINITION_INVALID,
            )
        now = self._now()
        session.execute(
            insert(saga).values(
                saga_id=saga_id,
                definition=definition,
                state=SagaState.RUNNING.value,
                step=0,
                phase=Phase.ACTION.value,
                attempt=1,
                payload=json.dumps(payload),
                results="{}",
                compensations=0,
                deadline_ms=None,
                error=None,
                history="[]",
                created_at_ms=now,
                updated_at_ms=now,
                version=0,
            )
        )
        rec = load(session, saga_id)
        rec.note(now, "started")
        self._enter_step(session, rec, now)
        save(session, rec, now)

    def on_reply(
        self,
        session: Session,
        *,
        saga_id: str,
        step: int,
        phase: Phase,
        attempt: int,
        ok: bool,
        result: Any = None,
        error: str = "",
    ) -> bool:
        """Apply one participant reply; ``False`` when it was stale (nothing changed)."""
        rec = load(session, saga_id)
        if not rec.state.pending or (rec.step, rec.phase, rec.attempt) != (step, phase, attempt):
            return False
        if rec.state == SagaState.AWAITING_APPROVAL:
            return False
        now = self._now()
        d = self._definition(rec)
        if phase == Phase.ACTION and ok:
            rec.results[str(step)] = result
            rec.note(now, f"step {d.steps[step].name} done")
            rec.step += 1
            self._enter_step(session, rec, now)
        elif phase == Phase.ACTION:
            rec.error = f"{Saga.SAGA_STEP_FAILED}: step {d.steps[step].name}: {error}"
            rec.note(now, rec.error)
            self._compensate_below(session, rec, step, now)
        elif ok:
            rec.compensations += 1
            rec.note(now, f"compensated {d.steps[step].name}")
            if self.metrics:
                self.metrics.compensations.labels(rec.definition).inc()
            self._compensate_below(session, rec, step, now)
        elif attempt < d.max_compensation_attempts:
            delay_ms = int(d.compensation_delay_s(attempt) * 1000)
            rec.attempt += 1
            rec.note(
                now,
                f"compensation {d.steps[step].name} failed ({error}); attempt {rec.attempt} "
                f"in {delay_ms / 1000:g} s",
            )
            if delay_ms > 0:
                rec.deadline_ms = now + delay_ms  # sent by retry_due (tick) once due
            else:
                self._send(session, rec, d)
        else:
            rec.state = SagaState.HUMAN
            rec.error = f"{Saga.SAGA_COMPENSATION_EXHAUSTED}: {d.steps[step].name}: {error}"
            rec.note(now, rec.error)
            self._event(session, rec, "saga.human")
            self._finished(rec)
        save(session, rec, now)
        return True

    def decide(self, session: Session, saga_id: str, *, approved: bool, note: str = "") -> bool:
        """An approval's decision; ``False`` if the saga is not waiting for one (late, expired)."""
        rec = load(session, saga_id)
        if rec.state != SagaState.AWAITING_APPROVAL:
            return False
        now = self._now()
        step = rec.step
        if approved:
            rec.note(now, f"approved {note}".strip())
            rec.step += 1
            rec.deadline_ms = None
            self._enter_step(session, rec, now)
        else:
            rec.error = f"{Saga.SAGA_APPROVAL_REJECTED}: {note}"
            rec.note(now, rec.error)
            self._compensate_below(session, rec, step, now)
        save(session, rec, now)
        return True

    def _due(self, session: Session, state: SagaState, now: int) -> Iterator[SagaRecord]:
        """Sagas in ``state`` whose ``deadline_ms`` has passed, each re-read ``FOR UPDATE`` (one
        that moved on meanwhile is skipped)."""
        ids = session.execute(
            select(saga.c.saga_id).where(saga.c.state == state.value, saga.c.deadline_ms <= now)
        ).scalars()
        for saga_id in ids.all():
            rec = load(session, saga_id)
            if rec.state == state and rec.deadline_ms is not None and rec.deadline_ms <= now:
                yield rec

    def expire_due(self, session: Session) -> int:
        """Expire approvals past their deadline: an expiry event, then compensation (scenario 6)."""
        now = self._now()
        expired = 0
        for rec in self._due(session, SagaState.AWAITING_APPROVAL, now):
            rec.error = f"{Saga.SAGA_APPROVAL_EXPIRED}: no decision by the deadline"
            rec.note(now, rec.error)
            self._event(session, rec, "approval.expired")
            if self.metrics:
                self.metrics.approvals_expired.labels(rec.definition).inc()
            self._compensate_below(session, rec, rec.step, now)
            save(session, rec, now)
            expired += 1
        return expired

    def retry_due(self, session: Session) -> int:
        """Send the compensations whose backoff has run out; returns how many were sent."""
        now = self._now()
        sent = 0
        for rec in self._due(session, SagaState.COMPENSATING, now):
            rec.deadline_ms = None
            self._send(session, rec, self._definition(rec))
            save(session, rec, now)
            sent += 1
        return sent

    def tick(self, session: Session) -> int:
        """What is due now: approvals past their deadline, compensations past their backoff."""
        return self.expire_due(session) + self.retry_due(session)

    def retry(self, session: Session, saga_id: str) -> None:
        """Human queue -> compensate again from the step that kept failing, attempts reset."""
        rec = self._human(session, saga_id)
        now = self._now()
        rec.state, rec.attempt, rec.deadline_ms = SagaState.COMPENSATING, 1, None
        rec.note(now, "retried by an operator")
        self._send(session, rec, self._definition(rec))
        save(session, rec, now)

    def resolve(self, session: Session, saga_id: str, *, note: str) -> None:
        """Human queue -> ``ABORTED``: a person undid (or accepted) what the compensation could not."""
        rec = self._human(session, saga_id)
        now = self._now()
        rec.state = SagaState.ABORTED
        rec.note(now, f"resolved by an operator: {note}")
        self._event(session, rec, "saga.aborted")
        save(session, rec, now)

    def _human(self, session: Session, saga_id: str) -> SagaRecord:
        rec = load(session, saga_id)
        if rec.state != SagaState.HUMAN:
            raise ConfigError(
                f"saga {saga_id} is {rec.state.value}, not in the human queue",
                reason=Saga.SAGA_NOT_IN_HUMAN_QUEUE,
            )
        return rec

    # -- transitions --------------------------------------------------------------------------
    def _enter_step(self, session: Session, rec: SagaRecord, now: int) -> None:
        d = self._definition(rec)
        if rec.step >= len(d.steps):
            rec.state = SagaState.COMPLETED
            rec.note(now, "completed")
            self._event(session, rec, "saga.completed")
            self._finished(rec)
            return
        step = d.steps[rec.step]
        rec.phase, rec.attempt = Phase.ACTION, 1
        if step.approval:
            rec.state = SagaState.AWAITING_APPROVAL
            rec.deadline_ms = now + int(step.deadline_s * 1000)
            self._event(session, rec, "approval.requested")
            return
        rec.state = SagaState.RUNNING
        self._send(session, rec, d)

    def _compensate_below(self, session: Session, rec: SagaRecord, k: int, now: int) -> None:
        """Compensate the highest participant step below ``k``, or abort when none is left."""
        d = self._definition(rec)
        rec.deadline_ms = None
        for i in range(k - 1, -1, -1):
            if d.steps[i].participant is not None:
                rec.state, rec.step, rec.phase, rec.attempt = (
                    SagaState.COMPENSATING,
                    i,
                    Phase.COMPENSATE,
                    1,
                )
                self._send(session, rec, d)
                return
        rec.state = SagaState.ABORTED
        rec.note(now, "aborted")
        self._event(session, rec, "saga.aborted")
        self._finished(rec)

    def _send(self, session: Session, rec: SagaRecord, d: SagaDefinition) -> None:
        step = d.steps[rec.step]
        assert step.participant is not None
        cmd = Command(
            saga_id=rec.saga_id,
            step=rec.step,
            name=step.name,
            phase=rec.phase,
            attempt=rec.attempt,
            key=step_key(rec.saga_id, rec.step, rec.phase),
            payload=rec.payload,
        )
        write(
            session,
            topic=self.topics.commands(step.participant),
            key=rec.saga_id.encode(),
            value=cmd.encode(),
            headers=[("msgId", f"{cmd.key}:{cmd.attempt}".encode())],
            branch_key=f"saga/{rec.saga_id}/cmd",
        )

    def _event(self, session: Session, rec: SagaRecord, kind: str) -> None:
        body = {
            "kind": kind,
            "saga_id": rec.saga_id,
            "state": rec.state.value,
            "step": rec.step,
            "error": rec.error,
        }
        write(
            session,
            topic=self.topics.events,
            key=rec.saga_id.encode(),
            value=json.dumps(body).encode(),
            headers=[("msgId", f"{rec.saga_id}:{kind}:{rec.version}".encode())],
            branch_key=f"saga/{rec.saga_id}/events",
        )

    def _finished(self, rec: SagaRecord) -> None:
        if self.metrics:
            self.metrics.finished.labels(rec.definition, rec.state.value).inc()
