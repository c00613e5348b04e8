"""The target gateway's STOP handler on ``fleet.control.<host>`` (R-LIFE-1).

Priced like SPAWN (:mod:`.handler`): the decision is a ``fleet_stops`` row keyed by ``stopId``,
written in the batch transaction with the worker's ``live`` -> ``stopping``; the offset is
committed; only then the stop runs (:class:`~pipeline.control.reaper.Reaper`: the profile's stop
command, the tombstone, ``reaped`` and the answer in one transaction).

* a **repeated** STOP (same ``stopId``, any msgId) stops nothing and is answered from the row;
* a STOP for a worker already stopping or reaped is answered as done (stopping is idempotent);
* a STOP for a gid that is no worker spawned here is refused ``UNKNOWN_WORKER``, in the batch
  transaction;
* a STOP from a requester that is neither the worker's spawner, a main of its job nor an
  operator of this host is refused ``NOT_PERMITTED`` (:func:`~.authority.may_stop`), in the
  batch transaction: nothing is stopped.

Answers go through :func:`~pipeline.control.answers.stage_answer`, the one answer path of the
control plane: ``INJECTED`` (done) or ``FAILED`` (reason) about the STOP's msgId.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from pipeline import schemas
from pipeline.envelope import Envelope, Kind
from pipeline.envelope.verify import Verified
from pipeline.errors import EnvelopeError
from pipeline.host.outbound import Publisher
from pipeline.reasons import Lifecycle
from pipeline.runtime import Staged
from pipeline.runtime.outcomes import ACK, DeadLetter, Outcome
from pipeline.support.clock import now_ms

from . import spawns, stops
from .answers import ANSWER_TTL_S, stage_answer
from .authority import Requester, may_stop
from .metrics import LifecycleMetrics
from .reaper import ReapCause, Reaper, begin_stopping

log = logging.getLogger(__name__)

UNKNOWN_WORKER = Lifecycle.UNKNOWN_WORKER.value
NOT_PERMITTED = Lifecycle.NOT_PERMITTED.value
STALLED_S = 60.0  # well past the stop command's own bound (reaper.STOP_TIMEOUT_S)


class StopVerdict(enum.StrEnum):
    """What a first STOP for a gid does (the ``outcome`` label of ``fleet_lifecycle_stops``)."""

    STOP = "stopped"  # a live worker: stop and reap it
    ALREADY_GONE = "already_gone"  # stopping or reaped already: answered as done
    UNKNOWN_WORKER = "unknown_worker"  # never spawned here, or refused/failed: refused
    NOT_PERMITTED = "not_permitted"  # the requester may not stop it: refused, nothing stopped


REFUSALS = {StopVerdict.UNKNOWN_WORKER: UNKNOWN_WORKER, StopVerdict.NOT_PERMITTED: NOT_PERMITTED}


def decide_stop(state: str | None) -> StopVerdict:
    """The pure core: the worker's ``fleet_spawns`` state (None: no row) -> the verdict."""
    if state == spawns.LIVE:
        return StopVerdict.STOP
    if state in spawns.GONE:
        return StopVerdict.ALREADY_GONE
    return StopVerdict.UNKNOWN_WORKER


@dataclass(frozen=True)
class _Stop:
    env: Envelope
    requester_host: str
    stop_id: str

    @property
    def gid(self) -> str:
        return str(self.env.spawn_id)


@dataclass
class _Decision:
    verdict: StopVerdict | None = None  # None: a repeat


class StopHandler:
    """Handles one verified STOP (called by the control topic's handler)."""

    def __init__(
        self,
        *,
        publisher: Publisher,
        sessions: sessionmaker[Session],
        reaper: Reaper,
        metrics: LifecycleMetrics | None = None,
        role_of: Callable[[str], str | None] = lambda gid: None,
        operators: Collection[str] = (),
    ) -> None:
        self.role_of = role_of
        self.operators = frozenset(operators)
        self.publisher = publisher
        self.sessions = sessions
        self.reaper = reaper
        self.metrics = metrics

    def handle(self, verified: Verified, tx: Staged) -> Outcome:
        env = verified.envelope
        try:
            body = schemas.decode("stop", env.body)
        except EnvelopeError as exc:
            return DeadLetter(reason=exc.reason, error=str(exc))
        if env.spawn_id is None or body["gid"] != env.spawn_id:
            return DeadLetter(reason="SCHEMA_INVALID", error="body gid != header spawnId")
        request = _Stop(env, verified.signer_host, str(body["stop_id"]))
        decision = _Decision()
        tx.call(functools.partial(self._decide, request=request, decision=decision))
        tx.after_commit(functools.partial(self._after_commit, request, decision))
        return ACK

    # -- in the batch transaction ------------------------------------------------------------
    def _decide(self, session: Session, *, request: _Stop, decision: _Decision) -> None:
        if stops.get(session, request.stop_id) is not None:
            return  # a repeat: answered after commit, from the stored outcome
        row = spawns.get(session, request.gid)
        verdict = decide_stop(None if row is None else row.state)
        refusal = None
        if verdict is not StopVerdict.UNKNOWN_WORKER:
            refusal = self._refusal(session, request, row)
            if refusal is not None:
                verdict = StopVerdict.NOT_PERMITTED
        state = {StopVerdict.STOP: stops.STOPPING, StopVerdict.ALREADY_GONE: stops.DONE}
        env = request.env
        stops.add(
            session,
            stop_id=request.stop_id,
            gid=request.gid,
            request_msg_id=env.msg_id,
            requester=env.sender,
            requester_host=request.requester_host,
            trace_id=env.trace_id,
            state=state.get(verdict, stops.REFUSED),
            reason=REFUSALS.get(verdict),
            created_ms=now_ms(),
        )
        decision.verdict = verdict
        if verdict is StopVerdict.STOP:
            begin_stopping(session, request.gid, ReapCause.STOP)
        elif verdict is StopVerdict.ALREADY_GONE:
            self._answer(session, request.env, request.requester_host, None)
        elif verdict is StopVerdict.NOT_PERMITTED:
            self._answer(session, request.env, request.requester_host, NOT_PERMITTED,
                         str(refusal))  # fmt: skip
        else:
            state_text = "no such worker" if row is None else f"spawn {row.state}"
            self._answer(session, request.env, request.requester_host, UNKNOWN_WORKER,
                         f"no live worker {request.gid} on {self.publisher.host} ({state_text})")  # fmt: skip

    def _refusal(self, session: Session, request: _Stop, row: Any) -> str | None:
        """Why the requester may not stop the worker of ``row`` (None: it may)."""
        env = request.env
        requester = Requester(env.sender, request.requester_host, self.role_of(env.sender))
        in_job = bool(row.job) and spawns.count(
            session, states=spawns.ADMITTED, job=row.job, requester=requester.gid,
            requester_host=requester.host,
        ) > 0  # fmt: skip
        return may_stop(requester, row, operators=self.operators, spawned_into_job=in_job,
                        host=self.publisher.host)  # fmt: skip

    # -- after the offset commit -------------------------------------------------------------
    def _after_commit(self, request: _Stop, decision: _Decision) -> None:
        if decision.verdict is StopVerdict.STOP:
            self._stop(request.stop_id)
        elif decision.verdict is None:
            with self.sessions.begin() as s:
                row = stops.get(s, request.stop_id)
                reason = None if row is None or row.state != stops.REFUSED else row.reason
                self._answer(s, request.env, request.requester_host, reason, "repeated STOP")
        outcome = "repeat" if decision.verdict is None else decision.verdict.value
        if self.metrics is not None:
            self.metrics.count_stop(outcome)
        log.info("STOP %s for %s: %s", request.stop_id, request.gid, outcome)

    def _stop(self, stop_id: str) -> None:
        """The stop itself, for a ``stopping`` stop row (after commit, or at boot)."""
        with self.sessions() as s:
            stop = stops.get(s, stop_id)
            row = spawns.get(s, stop.gid)
        if row is not None:
            self.reaper.end_process(row)
        answer = functools.partial(self._answer_row, stop)
        if not self.reaper.finish(stop.gid, ReapCause.STOP, answer=answer):
            with self.sessions.begin() as s:  # reaped meanwhile (it died, or a retry won)
                answer(s)

    def _answer_row(self, stop: Any, session: Session) -> None:
        env = Envelope.new(
            kind=Kind.STOP,
            msg_id=stop.request_msg_id,
            sender=stop.requester,
            to=self.publisher.gateway_id,
            spawn_id=stop.gid,
            trace_id=stop.trace_id,
            ttl_s=ANSWER_TTL_S,
        )
        if stops.finish(session, stop.stop_id):  # conditional: one answer per STOP, ever
            self._answer(session, env, stop.requester_host, None)

    def _answer(
        self, session: Session, env: Envelope, requester_host: str, reason: str | None,
        error: str = "",
    ) -> None:  # fmt: skip
        stage_answer(
            self.publisher,
            session,
            request_msg_id=env.msg_id,
            requester=env.sender,
            requester_host=requester_host,
            gid=str(env.spawn_id),
            trace_id=env.trace_id,
            reason=reason,
            error=error,
            stage="stop",
        )

    def retry_stalled(self, *, older_than_s: float = STALLED_S) -> int:
        """Each maintenance tick: a STOP still ``stopping`` long after its commit (its
        after-commit step raised) is finished again; the conditional ``reaped`` update keeps
        its answer single."""
        cutoff = now_ms() - round(older_than_s * 1000)
        with self.sessions() as s:
            stalled = [r.stop_id for r in stops.stopping(s) if r.created_ms < cutoff]
        for stop_id in stalled:
            log.warning("STOP %s still stopping: finishing it again", stop_id)
            self._stop(stop_id)
        return len(stalled)

    def recover(self) -> None:
        """At boot: finish the STOPs a crash interrupted after their commit (their answer
        included), then the deaths (:meth:`Reaper.recover`)."""
        with self.sessions() as s:
            pending = stops.stopping(s)
        for stop in pending:
            self._stop(stop.stop_id)
        self.reaper.recover()
