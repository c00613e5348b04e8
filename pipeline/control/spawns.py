"""Target side of a spawn: one row per ``spawnId`` -- the dedupe and the stored outcome.

The primary key on ``spawn_id`` is the dedupe (seed 001: "a row with a unique constraint, in the
handler's own transaction"): a repeated SPAWN finds the row and is answered from it, so it
starts nothing new. ``launching`` is written before the offset commit; the launch follows it
(forward path: commit before launch), so a crash leaves ``launching`` rows that are never
relaunched, only failed (:func:`interrupted`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Integer, String, Table, func, select, update
from sqlalchemy.orm import Session

from pipeline.store import metadata

spawns_table = Table(
    "fleet_spawns",
    metadata,
    Column("spawn_id", String(255), primary_key=True),  # = the worker's gid
    Column("request_msg_id", String(255), nullable=False),
    Column("requester", String(255), nullable=False),
    Column("requester_host", String(255), nullable=False),
    Column("profile", String(255), nullable=False),
    Column("parent", String(255), nullable=True, index=True),
    Column("job", String(255), nullable=True, index=True),
    Column("state", String(16), nullable=False, index=True),
    Column("reason", String(64), nullable=True),
    Column("pid", Integer, nullable=True),
    Column("created_ms", BigInteger, nullable=False),
)

LAUNCHING, LIVE, REFUSED, FAILED, REAPED = "launching", "live", "refused", "failed", "reaped"
ADMITTED = (LAUNCHING, LIVE, FAILED, REAPED)  # counted against the job's spawn budget
RUNNING = (LAUNCHING, LIVE)  # counted against the live caps


def get(session: Session, spawn_id: str) -> Any:
    return session.execute(select(spawns_table).where(spawns_table.c.spawn_id == spawn_id)).first()


def count(session: Session, *, states: tuple[str, ...], **where: str) -> int:
    t = spawns_table
    q = select(func.count()).select_from(t).where(t.c.state.in_(states))
    for column, value in where.items():
        q = q.where(t.c[column] == value)
    return int(session.execute(q).scalar_one())


def set_state(
    session: Session,
    spawn_id: str,
    state: str,
    *,
    reason: str | None = None,
    pid: int | None = None,
) -> None:
    values: dict[str, Any] = {"state": state, "reason": reason}
    if pid is not None:
        values["pid"] = pid
    session.execute(update(spawns_table).where(spawns_table.c.spawn_id == spawn_id).values(values))


def live(session: Session) -> list[Any]:
    return list(session.execute(select(spawns_table).where(spawns_table.c.state == LIVE)))


def interrupted(session: Session) -> list[Any]:
    """Rows left ``launching`` by a crash: never relaunched (at-most-once), failed at boot."""
    return list(session.execute(select(spawns_table).where(spawns_table.c.state == LAUNCHING)))


SIGNABLE = (LAUNCHING, LIVE)  # a local entity of this host: it may send, its gateway signs


def is_local_worker(session: Session, gid: str) -> bool:
    """True when ``gid`` is a worker this host spawned and has not stopped or reaped.

    ``launching`` counts: the row is committed before the process starts, and a worker may send
    before its gateway has marked it ``live``. This is the one place a spawned worker's
    locality is decided (the sender check of every client on this host reads it).
    """
    row = session.execute(
        select(spawns_table.c.state).where(spawns_table.c.spawn_id == gid)
    ).first()
    return row is not None and row.state in SIGNABLE
