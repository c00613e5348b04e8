"""Target side of a spawn: one row per ``spawnId`` -- the dedupe and the stored outcome.

The primary key on ``spawn_id`` is the dedupe (R-ACK-8: "a row with a unique constraint, in the
handler's own transaction"): a repeated SPAWN finds the row and is answered from it, so it
starts nothing new. ``launching`` is written before the offset commit; the launch follows it
(forward path: commit before launch), so a crash leaves ``launching`` rows that are never
relaunched, only failed (:func:`interrupted`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Integer, String, Table, func, select, update
from sqlalchemy.orm import Session

from pipeline.host.held import held_table
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
    Column("pid", Integer, nullable=True),  # = its process group id (a session leader)
    # which process that pid is: "<boot id>:<start ticks>" (orphans.process_token), recorded
    # right after the start, so a restart can end an interrupted launch and never a stranger
    Column("pid_start", String(64), nullable=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("ended_ms", BigInteger, nullable=True),  # when it was reaped (stopped or died)
)

LAUNCHING, LIVE, REFUSED, FAILED = "launching", "live", "refused", "failed"
STOPPING, REAPED = "stopping", "reaped"
ADMITTED = (LAUNCHING, LIVE, STOPPING, FAILED, REAPED)  # counted against the job's spawn budget
RUNNING = (LAUNCHING, LIVE, STOPPING)  # counted against the live caps
GONE = (STOPPING, REAPED)  # its inbox went away: mail for it is RECIPIENT_GONE
FINISHED = (REAPED, FAILED, REFUSED)  # the retention may purge these (after dedupe_s)


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
    **more: Any,
) -> None:
    values: dict[str, Any] = {"state": state, "reason": reason, **more}
    if pid is not None:
        values["pid"] = pid
    session.execute(update(spawns_table).where(spawns_table.c.spawn_id == spawn_id).values(values))


def record_launch(session: Session, spawn_id: str, *, pid: int, token: str | None) -> None:
    """Right after the start, still ``launching``: the process a restart would have to end."""
    t = spawns_table
    session.execute(update(t).where(t.c.spawn_id == spawn_id).values(pid=pid, pid_start=token))


def live(session: Session) -> list[Any]:
    return list(session.execute(select(spawns_table).where(spawns_table.c.state == LIVE)))


def in_state(session: Session, state: str) -> list[Any]:
    return list(session.execute(select(spawns_table).where(spawns_table.c.state == state)))


def is_gone(session: Session, gid: str) -> bool:
    """True when ``gid`` is a worker this host stopped or reaped (or is stopping)."""
    row = get(session, gid)
    return row is not None and row.state in GONE


def interrupted(session: Session) -> list[Any]:
    """Rows left ``launching`` by a crash: never relaunched (at-most-once), failed at boot."""
    return list(session.execute(select(spawns_table).where(spawns_table.c.state == LAUNCHING)))


def held_for_gone(session: Session) -> list[Any]:
    """Reaped gids that still have undrained held messages (mail that raced the reap)."""
    t, h = spawns_table, held_table
    pending = select(h.c.id).where(h.c.recipient == t.c.spawn_id, h.c.drained_at_ms.is_(None))
    return list(session.execute(select(t.c.spawn_id).where(t.c.state == REAPED, pending.exists())))


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
