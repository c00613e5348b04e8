"""The requester's spawn deadlines: a SPAWN with no outcome in time is one ``FAILED``.

A spawn is priced like an injection (seed 000 §7.8 / DESIGN §8): the requester's gateway runs
this duty each maintenance tick. A pending request past its deadline is settled ``failed`` and,
in the same transaction, one ``FAILED`` (reason ``SPAWN_TIMEOUT``, msgId ``failed-<SPAWN
msgId>``) lands in the requester's own held store: it needs no broker, and the unique held row
plus the settle-once row make a second copy impossible. A dead-lettered SPAWN reported by the
DLQ reporter carries the same msgId, so whichever arrives first is the one FAILED.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope, Kind
from pipeline.gateway.held import held_table
from pipeline.gateway.outbound import Publisher
from pipeline.gateway.receipts import failed_body

from . import requests

SPAWN_TIMEOUT = "SPAWN_TIMEOUT"


def _already_held(session: Session, recipient: str, msg_id: str) -> bool:
    t = held_table
    found = session.execute(
        select(t.c.id).where(t.c.recipient == recipient, t.c.msg_id == msg_id)
    ).first()
    return found is not None


class SpawnDeadlines:
    """One maintenance duty: ``tick()`` turns overdue spawn requests into one FAILED each."""

    def __init__(
        self, *, sessions: sessionmaker[Session], publisher: Publisher, ttl_s: float = 86400.0
    ) -> None:
        self.sessions = sessions
        self.publisher = publisher
        self.ttl_s = ttl_s
        self.timeouts = 0

    def tick(self, now_ms: int | None = None) -> int:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        failed = 0
        with self.sessions.begin() as s:
            for row in requests.overdue(s, now):
                if not requests.settle(s, row.msg_id, requests.FAILED, SPAWN_TIMEOUT):
                    continue
                if _already_held(s, row.requester, f"failed-{row.msg_id}"):
                    continue  # the DLQ reporter's FAILED for this SPAWN came first: keep one
                env = Envelope.new(
                    kind=Kind.FAILED,
                    msg_id=f"failed-{row.msg_id}",
                    sender=self.publisher.gateway_id,
                    to=row.requester,
                    body=failed_body(
                        row.msg_id,
                        row.spawn_id,
                        reason=SPAWN_TIMEOUT,
                        error=f"no outcome from {row.host} for spawn {row.spawn_id} in time",
                        stage="spawn",
                    ),
                    ttl_s=self.ttl_s,
                    trace_id=row.trace_id,
                )
                s.execute(
                    held_table.insert().values(
                        recipient=row.requester,
                        msg_id=env.msg_id,
                        kind=Kind.FAILED.value,
                        sender=env.sender,
                        trace_id=env.trace_id,
                        turn_id=None,
                        body=env.body,
                        headers=None,
                        topic=None,
                        ts_ms=env.ts_ms,
                        expires_at_ms=env.expires_at_ms,
                        held_at_ms=now,
                    )
                )
                failed += 1
        self.timeouts += failed
        return failed
