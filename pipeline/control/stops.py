"""Target side of a STOP: one row per ``stopId`` -- the dedupe and the stored outcome.

Like :mod:`.spawns` for SPAWN: the primary key on ``stop_id`` makes a repeated STOP (the
requester sent it twice, or the broker delivered it twice) find the first one's row and be
answered from it. ``stopping`` is written in the batch transaction; the stop itself (the
profile's ``stop`` command, the tombstone) runs after the offset commit, and the row becomes
``done`` with the answer in one transaction. A crash leaves ``stopping`` rows, finished at boot.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, String, Table, insert, select, update
from sqlalchemy.orm import Session

from pipeline.store import metadata

stops_table = Table(
    "fleet_stops",
    metadata,
    Column("stop_id", String(255), primary_key=True),
    Column("gid", String(255), nullable=False, index=True),  # the worker (its spawnId)
    Column("request_msg_id", String(255), nullable=False),  # the first STOP's msgId
    Column("requester", String(255), nullable=False),
    Column("requester_host", String(255), nullable=False),
    Column("trace_id", String(255), nullable=False),
    Column("state", String(16), nullable=False, index=True),  # stopping | done | refused
    Column("reason", String(64), nullable=True),
    Column("created_ms", BigInteger, nullable=False),
)

STOPPING, DONE, REFUSED = "stopping", "done", "refused"
FINISHED = (DONE, REFUSED)  # the retention may purge these (after dedupe_s); never stopping


def get(session: Session, stop_id: str) -> Any:
    return session.execute(select(stops_table).where(stops_table.c.stop_id == stop_id)).first()


def add(session: Session, **row: Any) -> None:
    session.execute(insert(stops_table).values(**row))


def finish(session: Session, stop_id: str) -> bool:
    """``stopping`` -> ``done``; False when it was done already (its answer went out then)."""
    t = stops_table
    result = session.execute(
        update(t).where(t.c.stop_id == stop_id, t.c.state == STOPPING).values(state=DONE)
    )
    return bool(getattr(result, "rowcount", 0))


def stopping(session: Session) -> list[Any]:
    """STOPs a crash interrupted after their commit: finished at boot."""
    return list(session.execute(select(stops_table).where(stops_table.c.state == STOPPING)))
