"""The requester's API for the control plane: ``spawn`` (seed 000 §7.8).

A SPAWN is an envelope of kind ``SPAWN`` from the requester to ``<host>._gateway``, keyed by
that id on ``fleet.control.<host>``, with header ``spawnId`` = the new worker's gid and an Avro
``spawn`` body. Like every send it is an outbox row (it succeeds while the broker is down), and
the same transaction writes a spawn-request row with a deadline (:mod:`.requests`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from pipeline import outbox, schemas
from pipeline.envelope import Envelope, Kind, encode
from pipeline.envelope.model import now_ms
from pipeline.errors import DeliveryError
from pipeline.gateway import roster_cache
from pipeline.gateway.config import check_gid
from pipeline.gateway.outbound import Publisher
from pipeline.gateway.senders import LocalSenders

from . import requests
from .caps import LifecycleReason

UNKNOWN_HOST = LifecycleReason.UNKNOWN_HOST.value


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnRequest:
    """What ``spawn`` queued: ``msg_id`` correlates the outcome, ``spawn_id`` is the new gid."""

    msg_id: str
    spawn_id: str
    host: str
    profile: str
    trace_id: str
    deadline_ms: int


class ControlClient:
    """Spawn workers on any live host (the CLI, libraries and the MCP face call this)."""

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
        to = f"{host}._gateway"
        env = Envelope.new(
            kind=Kind.SPAWN,
            sender=requester,
            to=to,
            body=body,
            ttl_s=self.deadline_s,
            spawn_id=gid,
        )
        topic = self.publisher.topics.control(host)
        deadline = env.ts_ms + round(self.deadline_s * 1000)
        with self.sessions.begin() as s:
            if self.local_senders is not None:
                self.local_senders.check(s, requester)
            if roster_cache.lookup(s, to, now_ms()) is None:
                raise DeliveryError(
                    f"unknown host {host!r}: no live gateway entry {to} in the roster",
                    reason=UNKNOWN_HOST,
                    context={"host": host},
                )
            key, headers, value = encode(env, topic=topic, signer=self.publisher.signer)
            outbox.write(
                s,
                topic=topic,
                key=key,
                value=value,
                headers=headers,
                branch_key=f"{self.publisher.host}>{to}",
            )
            requests.track(
                s,
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
