"""Requester side of a spawn: one row per SPAWN sent, written in the send's transaction.

Like the forward path's tracking (``gateway/tracking.py``): a spawn costs like an injection, so
the requester holds a deadline; the outcome (or its absence by the deadline) settles the row
exactly once (seed 000 §7.8, issue 15).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, String, Table, insert, select, update
from sqlalchemy.orm import Session

from pipeline.store import metadata

spawn_requests_table = Table(
    "fleet_spawn_requests",
    metadata,
    Column("msg_id", String(255), primary_key=True),  # the SPAWN's msgId
    Column("spawn_id", String(255), nullable=False, index=True),  # = the new worker's gid
    Column("requester", String(255), nullable=False),
    Column("host", String(255), nullable=False),
    Column("profile", String(255), nullable=False),
    Column("parent", String(255), nullable=True),
    Column("job", String(255), nullable=True),
    Column("trace_id", String(255), nullable=False),
    Column("sent_ms", BigInteger, nullable=False),
    Column("deadline_ms", BigInteger, nullable=False, index=True),
    Column("state", String(16), nullable=False, index=True),  # pending | spawned | failed
    Column("reason", String(64), nullable=True),
)

PENDING, SPAWNED, FAILED = "pending", "spawned", "failed"


def track(session: Session, **row: Any) -> None:
    session.execute(insert(spawn_requests_table).values(state=PENDING, **row))


def settle(session: Session, msg_id: str, state: str, reason: str | None = None) -> bool:
    """Move a pending request to ``state``; False when it was already settled."""
    result = session.execute(
        update(spawn_requests_table)
        .where(spawn_requests_table.c.msg_id == msg_id, spawn_requests_table.c.state == PENDING)
        .values(state=state, reason=reason)
    )
    return bool(getattr(result, "rowcount", 0))


def state_of(session: Session, msg_id: str) -> str | None:
    row = session.execute(
        select(spawn_requests_table.c.state).where(spawn_requests_table.c.msg_id == msg_id)
    ).first()
    return None if row is None else str(row.state)


def overdue(session: Session, now: int, limit: int = 500) -> list[Any]:
    t = spawn_requests_table
    return list(
        session.execute(
            select(t)
            .where(t.c.state == PENDING, t.c.deadline_ms < now)
            .order_by(t.c.deadline_ms)
            .limit(limit)
        )
    )


def of_requester(session: Session, requester: str, limit: int = 1000) -> list[Any]:
    """The spawns ``requester`` asked for, newest first."""
    t = spawn_requests_table
    query = select(t).where(t.c.requester == requester).order_by(t.c.sent_ms.desc())
    return list(session.execute(query.limit(limit)))
