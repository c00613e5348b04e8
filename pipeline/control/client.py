"""The requester's API for the control plane: ``spawn`` and ``stop`` (R-SPAWN-3, R-LIFE-3).

A SPAWN is an envelope of kind ``SPAWN`` from the requester to ``<host>._gateway``, keyed by
that id on ``fleet.control.<host>``, with header ``spawnId`` = the new worker's gid and an Avro
``spawn`` body. Like every send it is an outbox row (it succeeds while the broker is down), and
the same transaction writes a spawn-request row with a deadline (:mod:`.requests`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from pipeline import outbox, schemas
from pipeline.envelope import Envelope, Kind, encode
from pipeline.errors import DeliveryError
from pipeline.host import deadlines, roster_cache
from pipeline.host.config_checks import check_gid
from pipeline.host.outbound import Publisher
from pipeline.host.senders import LocalSenders
from pipeline.presence.model import gateway_gid
from pipeline.reasons import Lifecycle
from pipeline.support.clock import now_ms

from . import requests

UNKNOWN_HOST = Lifecycle.UNKNOWN_HOST.value


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnRequest:
    """What ``spawn`` queued: ``msg_id`` correlates the outcome, ``spawn_id`` is the new gid."""

    msg_id: str
    spawn_id: str
    host: str
    profile: str
    trace_id: str
    deadline_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRequest:
    """What ``stop`` queued: ``msg_id`` correlates the outcome, due by ``deadline_ms`` (else
    one ``FAILED``, ``STOP_TIMEOUT``)."""

    msg_id: str
    stop_id: str
    gid: str
    host: str
    trace_id: str
    deadline_ms: int = 0


class ControlClient:
    """Spawn and stop workers on any live host (the CLI, libraries and the MCP face call this)."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        publisher: Publisher,
        deadline_s: float = 60.0,
        local_senders: LocalSenders | None = None,
    ) -> None:
        self.sessions = sessions
        self.publisher = publisher
        self.deadline_s = deadline_s
        self.local_senders = local_senders

    def spawn(
        self,
        *,
        requester: str,
        host: str,
        profile: str,
        spawn_id: str | None = None,
        parent: str | None = None,
        job: str | None = None,
        brief: str | None = None,
        budget: int | None = None,
        groups: tuple[str, ...] = (),
    ) -> SpawnRequest:
        """Queue a SPAWN to ``host``; ``UNKNOWN_HOST`` when its gateway entry is not live."""
        gid = check_gid(spawn_id or f"w-{uuid.uuid4().hex[:12]}", key="spawn_id")
        body = schemas.encode(
            "spawn",
            {
                "spawn_id": gid,
                "profile": profile,
                "target_host": host,
                "requested_by": requester,
                "groups": list(groups),
                "brief": brief,
                "params": {},
                "parent": parent or requester,
                "job": job,
                "budget": budget,
            },
        )
        env = Envelope.new(
            kind=Kind.SPAWN,
            sender=requester,
            to=gateway_gid(host),
            body=body,
            ttl_s=self.deadline_s,
            spawn_id=gid,
        )
        deadline = env.ts_ms + round(self.deadline_s * 1000)
        with self.sessions.begin() as s:
            self._queue(s, env, host)
            deadlines.track(
                s,
                requests.SPAWN,
                msg_id=env.msg_id,
                spawn_id=gid,
                requester=requester,
                host=host,
                profile=profile,
                parent=parent or requester,
                job=job,
                trace_id=env.trace_id,
                sent_ms=env.ts_ms,
                deadline_ms=deadline,
            )
        return SpawnRequest(
            msg_id=env.msg_id,
            spawn_id=gid,
            host=host,
            profile=profile,
            trace_id=env.trace_id,
            deadline_ms=deadline,
        )

    def stop(
        self,
        *,
        requester: str,
        gid: str,
        host: str | None = None,
        reason: str | None = None,
        stop_id: str | None = None,
    ) -> StopRequest:
        """Queue a STOP for worker ``gid`` to its host (from the roster unless ``host`` is
        given). ``UNKNOWN_WORKER`` when no binding of ``gid`` is known (never announced, or
        already stopped: its presence was tombstoned); ``UNKNOWN_HOST`` as for spawn. The
        outcome (``INJECTED`` = stopped, or ``FAILED`` with the reason) arrives through poll."""
        stop_id = check_gid(stop_id or f"stop-{uuid.uuid4().hex[:12]}", key="stop_id")
        with self.sessions.begin() as s:
            if host is None:
                entry = roster_cache.lookup(s, gid)
                if entry is None:
                    raise DeliveryError(
                        f"no presence binding for {gid!r}: never announced, or already "
                        "stopped (tombstoned); pass its host to ask anyway",
                        reason=Lifecycle.UNKNOWN_WORKER.value,
                        context={"gid": gid},
                    )
                host = entry.host
            body = schemas.encode(
                "stop", {"stop_id": stop_id, "gid": gid, "requested_by": requester,
                         "reason": reason},
            )  # fmt: skip
            env = Envelope.new(
                kind=Kind.STOP,
                sender=requester,
                to=gateway_gid(host),
                body=body,
                ttl_s=self.deadline_s,
                spawn_id=gid,
            )
            self._queue(s, env, host)
            deadline = env.ts_ms + round(self.deadline_s * 1000)
            deadlines.track(
                s,
                requests.STOP,
                msg_id=env.msg_id,
                stop_id=stop_id,
                gid=gid,
                requester=requester,
                host=host,
                trace_id=env.trace_id,
                sent_ms=env.ts_ms,
                deadline_ms=deadline,
            )
        return StopRequest(
            msg_id=env.msg_id,
            stop_id=stop_id,
            gid=gid,
            host=host,
            trace_id=env.trace_id,
            deadline_ms=deadline,
        )

    def workers(self, requester: str) -> list[dict[str, Any]]:
        """The workers ``requester`` spawned (newest first): gid, host, profile, job, the
        request's state (pending | spawned | failed, with its reason) and whether the gid is
        live in the roster now (a stopped or reaped worker is not: its presence is gone)."""
        now = now_ms()
        with self.sessions() as s:
            rows = requests.of_requester(s, requester)
            return [
                {"gid": r.spawn_id, "host": r.host, "profile": r.profile, "job": r.job,
                 "parent": r.parent, "state": r.state, "reason": r.reason,
                 "live": roster_cache.lookup(s, r.spawn_id, now) is not None,
                 "ageS": round((now - r.sent_ms) / 1000, 1)}
                for r in rows
            ]  # fmt: skip

    def _queue(self, session: Session, env: Envelope, host: str) -> None:
        """One control record to ``host``'s gateway through the outbox; ``UNKNOWN_HOST`` (and
        nothing written) when that gateway's entry is not live; ``NOT_LOCAL_SENDER`` when the
        requester is no local entity (configured, or a live worker spawned here)."""
        if self.local_senders is not None:
            self.local_senders.check(session, env.sender)
        if roster_cache.lookup(session, env.to, now_ms()) is None:
            raise DeliveryError(
                f"unknown host {host!r}: no live gateway entry {env.to} in the roster",
                reason=UNKNOWN_HOST,
                context={"host": host},
            )
        topic = self.publisher.topics.control(host)
        key, headers, value = encode(env, topic=topic, signer=self.publisher.signer)
        outbox.write(
            session,
            topic=topic,
            key=key,
            value=value,
            headers=headers,
            branch_key=f"{self.publisher.host}>{env.to}",
        )
