"""The target gateway's SPAWN handler on ``fleet.control.<host>`` (R-SPAWN-1).

Priced like the forward path: the decision (a ``fleet_spawns`` row keyed by ``spawnId``) is
written in the batch transaction, the offset is committed, and only then the worker is launched
(an after-commit effect). So a crash between commit and launch never launches twice: the row
stays ``launching`` and :meth:`SpawnHandler.recover` fails it at the next boot.

* a **repeated** SPAWN (same ``spawnId``, any msgId) starts nothing and is answered from the
  stored outcome once the first one's launch has run;
* an unknown profile is refused ``UNKNOWN_PROFILE``, a requester the profile's
  ``spawn_allowed`` does not list ``NOT_PERMITTED`` (:mod:`.authority`), a spawn over a cap
  ``CAP_EXCEEDED``; the refusal is stored (a repeat is refused the same way) and answered in
  the same transaction;
* a launched worker is registered as a local inject entity (its profile's injector, filled),
  its presence published, and the requester gets ``INJECTED`` for its SPAWN's msgId (a spawn
  lands like an injection); a launch that cannot start is ``FAILED`` (``LAUNCH_FAILED``);
* the started process is recorded at once (pid + :func:`~.orphans.process_token`), so a crash
  before ``live`` leaves a row whose process group the next boot ends (:mod:`.orphans`).

A ``STOP`` on the same topic goes to :class:`~pipeline.control.stop_handler.StopHandler`; both
answer through :func:`~pipeline.control.answers.stage_answer`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session, sessionmaker

from pipeline import schemas
from pipeline.envelope import REPLAY, Envelope, Kind, Verifier
from pipeline.errors import EnvelopeError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.host import dbapi
from pipeline.host.entity_config import ProfileConfig
from pipeline.host.outbound import Publisher
from pipeline.reasons import Lifecycle
from pipeline.runtime import Record, Staged
from pipeline.runtime.outcomes import ACK, DeadLetter, Outcome
from pipeline.store import read_sessions
from pipeline.support.clock import now_ms
from pipeline.tracing import CONTROL_SPAWN, CONTROL_STOP, TRACING

from . import spawns
from .answers import ANSWER_TTL_S, stage_answer
from .authority import Requester, may_spawn
from .caps import Admission, Counts, admit
from .job_ledger import JobLedger, ended_spawns, fleet_admission
from .launcher import Launcher
from .orphans import end_group, process_token
from .stop_handler import StopHandler
from .sweep_due import sweep_due

log = logging.getLogger(__name__)

LAUNCH_FAILED = Lifecycle.LAUNCH_FAILED
LAUNCH_INTERRUPTED = Lifecycle.LAUNCH_INTERRUPTED
NOT_A_CONTROL_KIND = Lifecycle.NOT_A_CONTROL_KIND
NOT_PERMITTED = Lifecycle.NOT_PERMITTED

OnLive = Callable[[str, ProfileConfig, Mapping[str, str]], None]


@dataclass
class _Decision:
    launch: bool = False


@dataclass(frozen=True)
class _Request:
    env: Envelope
    requester_host: str
    body: dict[str, Any]
    fleet: Admission | None = None  # the job ledger's verdict (R-FAIL-8), when it was asked


class SpawnHandler:
    """Handles one control record (the runtime's ``Handler``)."""

    def __init__(
        self,
        *,
        host: str,
        verifier: Verifier,
        publisher: Publisher,
        sessions: sessionmaker[Session],
        profiles: Mapping[str, ProfileConfig],
        launcher: Launcher,
        on_live: OnLive,
        count: Callable[[str], None] = lambda outcome: None,
        stops: StopHandler | None = None,
        role_of: Callable[[str], str | None] = lambda gid: None,
        hooks: Hooks = NO_HOOKS,
        ledger: JobLedger | None = None,
    ) -> None:
        self.stops = stops
        self.role_of = role_of
        self.hooks = hooks
        self.ledger = ledger
        self.host = host
        self.verifier = verifier
        self.publisher = publisher
        self.sessions = sessions
        bind = sessions.kw.get("bind")  # the sweep looks first with a read: no write lock
        self.reads = read_sessions(bind) if isinstance(bind, Engine) else sessions
        # the sweep's look-first, on a connection kept between ticks (dbapi.HeldReader)
        self.look = dbapi.HeldReader(bind) if isinstance(bind, Engine) else None
        self.profiles = dict(profiles)
        self.launcher = launcher
        self.on_live = on_live
        self.count = count

    def handle(self, record: Record, tx: Staged) -> Outcome:
        try:
            verified = self.verifier.verify(
                topic=record.topic, key=record.key, headers=list(record.headers), value=record.value
            )
            env = verified.envelope
            if TRACING.on:  # what the request stages next (its answers) is a child of this
                TRACING.event(CONTROL_STOP if env.kind is Kind.STOP else CONTROL_SPAWN,
                              trace_id=env.trace_id, msg_id=env.msg_id, headers=record.headers)  # fmt: skip
            if env.kind is Kind.STOP and self.stops is not None:
                return self.stops.handle(verified, tx)
            if env.kind is not Kind.SPAWN or env.spawn_id is None:
                return DeadLetter(reason=NOT_A_CONTROL_KIND, error=f"{env.kind} on {record.topic}")
            body = schemas.decode("spawn", env.body)
        except EnvelopeError as exc:
            return ACK if exc.reason == REPLAY else DeadLetter(reason=exc.reason, error=str(exc))
        if body["spawn_id"] != env.spawn_id:
            return DeadLetter(reason="SCHEMA_INVALID", error="body spawn_id != header spawnId")
        fleet = self._fleet(env, verified.signer_host, body)
        request = _Request(env, verified.signer_host, body, fleet)
        decision = _Decision()
        tx.call(functools.partial(self._decide, request=request, decision=decision))
        tx.after_commit(functools.partial(self._after_commit, request, decision))
        return ACK

    def _fleet(self, env: Envelope, host: str, body: dict[str, Any]) -> Admission | None:
        """Per-job caps across every host: a claim on the job ledger, before the transaction
        (none for a requester the profile does not admit: it is refused without one)."""
        spec, job = self.profiles.get(str(body["profile"])), body.get("job")
        if self.ledger is None or spec is None or not job:
            return None
        if may_spawn(Requester(env.sender, host, self.role_of(env.sender)), spec) is not None:
            return None
        return fleet_admission(
            self.ledger, host=self.host, spec=spec, job=str(job), spawn_id=str(env.spawn_id),
            expires_ms=env.expires_at_ms,
        )  # fmt: skip

    # -- in the batch transaction ------------------------------------------------------------
    def _decide(self, session: Session, *, request: _Request, decision: _Decision) -> None:
        env, body = request.env, request.body
        gid = str(env.spawn_id)
        if spawns.get(session, gid) is not None:
            return  # a repeat: answered after commit, from the stored outcome
        parent, job = body.get("parent") or env.sender, body.get("job")
        profile = str(body["profile"])
        running, local_job = spawns.RUNNING, job if request.fleet is None else None
        counts = Counts(
            live_of_parent=spawns.count(session, states=running, parent=parent, profile=profile),
            live_of_job=spawns.count(session, states=running, job=local_job, profile=profile)
            if local_job
            else 0,
            spawned_of_job=spawns.count(
                session, states=spawns.ADMITTED, job=local_job, profile=profile
            )
            if local_job
            else 0,
        )
        verdict = admit(self.profiles, profile, counts, job=local_job)
        refusal = None if profile not in self.profiles else may_spawn(
            Requester(env.sender, request.requester_host, self.role_of(env.sender)),
            self.profiles[profile],
        )  # fmt: skip
        if refusal is not None:
            verdict = dataclasses.replace(
                verdict, admitted=False, reason=NOT_PERMITTED, detail=refusal
            )
        elif verdict.admitted and request.fleet is not None:
            verdict = request.fleet  # the job's caps were counted across the fleet
        session.execute(
            insert(spawns.spawns_table).values(
                spawn_id=gid,
                request_msg_id=env.msg_id,
                requester=env.sender,
                requester_host=request.requester_host,
                profile=profile,
                parent=parent,
                job=job,
                state=spawns.LAUNCHING if verdict.admitted else spawns.REFUSED,
                reason=None if verdict.reason is None else verdict.reason.value,
                created_ms=now_ms(),
            )
        )
        if verdict.admitted:
            decision.launch = True
            return
        self.count(f"refused_{str(verdict.reason).lower()}")
        self._answer(session, request, str(verdict.reason), verdict.detail)

    # -- after the offset commit -------------------------------------------------------------
    def _after_commit(self, request: _Request, decision: _Decision) -> None:
        if decision.launch:
            self._launch(request)
            return
        gid = str(request.env.spawn_id)
        with self.sessions.begin() as s:
            row = spawns.get(s, gid)
            if row is None or row.request_msg_id == request.env.msg_id:
                return  # the first request's own refusal was answered in its transaction
            self.count("repeat")
            if row.state in (spawns.LIVE, spawns.STOPPING, spawns.REAPED):
                self._answer(s, request, None, "")
            else:
                self._answer(s, request, row.reason or LAUNCH_FAILED, f"spawn {gid} {row.state}")

    def _launch(self, request: _Request) -> None:
        env, body = request.env, request.body
        gid = str(env.spawn_id)
        profile = self.profiles[str(body["profile"])]
        values = self.values(
            gid, profile, parent=body.get("parent") or env.sender, job=body.get("job"),
            budget=body.get("budget"),
        )  # fmt: skip
        try:
            pid = self.launcher.launch(profile, values, body.get("brief"))
        except OSError as exc:
            log.warning("spawn %s: launch failed: %s", gid, exc)
            with self.sessions.begin() as s:
                spawns.set_state(s, gid, spawns.FAILED, reason=LAUNCH_FAILED)
                self._answer(s, request, LAUNCH_FAILED, str(exc))
            self.count("failed")
            return
        with self.sessions.begin() as s:  # before anything else: what a restart must end
            spawns.record_launch(s, gid, pid=pid, token=process_token(pid))
        self.hooks.at(Window.LAUNCHED_NOT_LIVE)
        self.on_live(gid, profile, values)
        with self.sessions.begin() as s:
            spawns.set_state(s, gid, spawns.LIVE, pid=pid)
            self._answer(s, request, None, "")
        self.count("spawned")

    def values(
        self,
        gid: str,
        profile: ProfileConfig,
        *,
        parent: str | None,
        job: str | None,
        budget: int | None = None,
    ) -> dict[str, str]:
        """The placeholder values of the profile's templates for one worker."""
        return {
            "gid": gid,
            "host": self.host,
            "profile": profile.name,
            "parent": parent or "",
            "job": job or "",
            "budget": "" if budget is None else str(budget),
            "brief_file": self.launcher.brief_file(gid),
        }

    def sweep(self) -> None:
        """Each maintenance tick: reap workers whose process died, collect exited children.
        One read asks first whether any worker or STOP needs looking at (:mod:`.sweep_due`)."""
        if self.stops is not None:
            if self.look is not None:
                due = sweep_due(self.look)
            else:
                with self.reads() as r:
                    due = sweep_due(r)
            if due.live or due.held_for_gone:
                self.stops.reaper.sweep()
            if due.stopping:
                self.stops.retry_stalled()
        self.launcher.reap()
        if self.ledger is not None and self.profiles:  # slots of ended workers go back to the job
            self.ledger.reconcile(functools.partial(ended_spawns, self.sessions))

    def close(self) -> None:
        """Give the sweep's look-first connection back (before the engine is disposed)."""
        if self.look is not None:
            self.look.close()

    def relive(self) -> int:
        """At boot: finish interrupted stops, fail interrupted launches (:meth:`recover`), and
        register the live workers again (entity, presence)."""
        if self.stops is not None:
            self.stops.recover()
        rows = self.recover()
        for row in rows:
            profile = self.profiles.get(row.profile)
            if profile is not None:
                values = self.values(row.spawn_id, profile, parent=row.parent, job=row.job)
                self.on_live(row.spawn_id, profile, values)
        return len(rows)

    def recover(self) -> list[Any]:
        """At boot: fail rows a crash left ``launching`` (never relaunch), ending the process
        group a launch may have started (:func:`~.orphans.end_group`, its outcome in the
        FAILED); return live rows."""
        with self.sessions() as s:
            pending = spawns.interrupted(s)
        ended = {row.spawn_id: end_group(row.pid, row.pid_start) for row in pending}
        with self.sessions.begin() as s:
            for row in spawns.interrupted(s):
                spawns.set_state(s, row.spawn_id, spawns.FAILED, reason=LAUNCH_INTERRUPTED)
                what = ended.get(row.spawn_id) or "its process was not looked at"
                log.warning("spawn %s interrupted before live: %s", row.spawn_id, what)
                env = Envelope.new(
                    kind=Kind.SPAWN,
                    msg_id=row.request_msg_id,
                    sender=row.requester,
                    to=self.publisher.gateway_id,
                    spawn_id=row.spawn_id,
                    ttl_s=ANSWER_TTL_S,
                )
                request = _Request(env, row.requester_host, {})
                self._answer(s, request, LAUNCH_INTERRUPTED,
                             f"the gateway stopped before the worker went live; {what}")  # fmt: skip
            return spawns.live(s)

    def _answer(self, session: Session, request: _Request, reason: str | None, error: str) -> None:
        env = request.env
        stage_answer(
            self.publisher,
            session,
            request_msg_id=env.msg_id,
            requester=env.sender,
            requester_host=request.requester_host,
            gid=str(env.spawn_id),
            trace_id=env.trace_id,
            reason=reason,
            error=error,
        )
