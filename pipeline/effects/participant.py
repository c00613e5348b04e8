"""A saga participant: runs commands with their idempotency keys; the orchestrator's reply handler.

Both are runtime :class:`~pipeline.runtime.ports.Handler` s, so a :class:`ConsumerRuntime` (or a
pool worker) consumes them from Kafka; their writes are staged into the batch transaction.

Participant, per command, in one transaction: ``reserve`` the step's key; on ``FirstUse`` run the
action or compensation inside a savepoint, store its result (``complete``) and write the reply
through the outbox. A redelivered command finds ``Done`` and replies with the stored result -- the
effect is never applied twice. A failed **action** is stored (``fail``: the saga compensates, a
redelivery must not retry it); a failed **compensation** releases its key, since it must be
retried to completion (R-FAIL-5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from pipeline.errors import FleetError, StoreError
from pipeline.outbox import write
from pipeline.reasons import Idempotency, Saga
from pipeline.record import Record
from pipeline.runtime.outcomes import ACK, Outcome
from pipeline.runtime.staging import Staged

from .reservation import Done, FirstUse, InProgress, Mismatch, StoredError
from .saga_model import Command, Phase, Reply
from .saga_topics import SagaTopics
from .store import IdempotencyStore

StepFn = Callable[[Session, dict[str, Any]], Any]
SAGA_KEY_CLASS = "saga"


class StepFailed(FleetError):
    """Raised by an action or compensation that did not take effect (a business refusal)."""

    reason = Saga.SAGA_STEP_FAILED


class Participant:
    """Runs ``actions[name]`` / ``compensations[name]`` for commands addressed to ``name``."""

    def __init__(
        self,
        name: str,
        *,
        actions: Mapping[str, StepFn],
        compensations: Mapping[str, StepFn],
        idempotency: IdempotencyStore,
        topics: SagaTopics,
        key_class: str = SAGA_KEY_CLASS,
    ) -> None:
        self.name = name
        self.actions = dict(actions)
        self.compensations = dict(compensations)
        self.idem = idempotency
        self.topics = topics
        self.key_class = key_class
        idempotency.key_class(key_class)  # refuse an undeclared class at build time

    def handle(self, record: Record, tx: Staged) -> Outcome:
        cmd = Command.decode(record.value or b"{}")
        tx.call(lambda session: self.apply(session, cmd))
        return ACK

    def apply(self, session: Session, cmd: Command) -> Reply:
        fns = self.actions if cmd.phase == Phase.ACTION else self.compensations
        fn = fns[cmd.name]
        fingerprint = {"saga": cmd.saga_id, "step": cmd.step, "phase": cmd.phase.value}
        answer = self.idem.reserve(session, cmd.key, fingerprint, key_class=self.key_class)
        if isinstance(answer, InProgress):
            raise StoreError(f"step key {cmd.key} in progress elsewhere", retriable=True)
        if isinstance(answer, Mismatch):
            reply = self._reply(cmd, ok=False, error=Idempotency.IDEM_PAYLOAD_MISMATCH)
        elif isinstance(answer, Done):
            reply = self._reply(
                cmd,
                ok=answer.ok,
                result=answer.value,
                error=answer.error.message if answer.error else "",
            )
        else:
            reply = self._run(session, cmd, fn, answer)
        write(
            session,
            topic=self.topics.replies,
            key=cmd.saga_id.encode(),
            value=reply.encode(),
            headers=[("msgId", f"reply:{cmd.key}:{cmd.attempt}".encode())],
            branch_key=f"saga/{cmd.saga_id}/reply/{self.name}",
        )
        return reply

    def _run(self, session: Session, cmd: Command, fn: StepFn, _first: FirstUse) -> Reply:
        try:
            with session.begin_nested():  # the effect rolls back alone; the key row stays
                result = fn(session, dict(cmd.payload))
        except StepFailed as exc:
            if cmd.phase == Phase.ACTION:
                err = StoredError(reason=exc.reason, message=str(exc))
                self.idem.fail(session, cmd.key, err, key_class=self.key_class)
            else:
                self.idem.release(session, cmd.key, key_class=self.key_class)
            return self._reply(cmd, ok=False, error=str(exc))
        self.idem.complete(session, cmd.key, result, key_class=self.key_class)
        return self._reply(cmd, ok=True, result=result)

    def _reply(self, cmd: Command, *, ok: bool, result: Any = None, error: str = "") -> Reply:
        return Reply(
            saga_id=cmd.saga_id,
            step=cmd.step,
            phase=cmd.phase,
            attempt=cmd.attempt,
            ok=ok,
            result=result,
            error=error,
        )


class ReplyHandler:
    """The orchestrator's consumer: each reply advances its saga in the batch transaction."""

    def __init__(self, orchestrator: Any) -> None:
        self.orchestrator = orchestrator

    def handle(self, record: Record, tx: Staged) -> Outcome:
        reply = Reply.decode(record.value or b"{}")
        tx.call(
            lambda session: self.orchestrator.on_reply(
                session,
                saga_id=reply.saga_id,
                step=reply.step,
                phase=reply.phase,
                attempt=reply.attempt,
                ok=reply.ok,
                result=reply.result,
                error=reply.error,
            )
        )
        return ACK
