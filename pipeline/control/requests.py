"""Requester side of a spawn or stop: one row per SPAWN (STOP) sent, in the send's transaction.

A spawn costs like an injection, so the requester holds a deadline: the outcome (or its absence
by the deadline: one ``FAILED``, ``SPAWN_TIMEOUT``) settles the row exactly once
(R-SPAWN-3, R-LIFE-3). The tracker is the forward path's own, :mod:`pipeline.host.deadlines`;
this module is the table (with what was asked: host, profile, parent, job) and its :data:`SPAWN`
kind; a STOP is tracked the same way (:data:`STOP`: no outcome in time is one ``FAILED``,
``STOP_TIMEOUT``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, String, Table, select
from sqlalchemy.orm import Session

from pipeline.host.deadlines import FAILED, PENDING, Tracked, tracked_columns
from pipeline.reasons import Lifecycle
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
    *tracked_columns(),  # state: pending | spawned | failed
)

stop_requests_table = Table(
    "fleet_stop_requests",
    metadata,
    Column("msg_id", String(255), primary_key=True),  # the STOP's msgId
    Column("stop_id", String(255), nullable=False, index=True),
    Column("gid", String(255), nullable=False),  # the worker asked to stop
    Column("requester", String(255), nullable=False),
    Column("host", String(255), nullable=False),
    *tracked_columns(),  # state: pending | stopped | failed
)

SPAWNED, STOPPED = "spawned", "stopped"
SPAWN_TIMEOUT = Lifecycle.SPAWN_TIMEOUT.value
STOP_TIMEOUT = Lifecycle.STOP_TIMEOUT.value

SPAWN = Tracked(
    name="spawn",
    table=spawn_requests_table,
    owner="requester",
    about="spawn_id",
    answered=SPAWNED,
    reason=SPAWN_TIMEOUT,
    stage="spawn",
    describe=lambda row: f"no outcome from {row.host} for spawn {row.spawn_id} in time",
)

STOP = Tracked(
    name="stop",
    table=stop_requests_table,
    owner="requester",
    about="gid",
    answered=STOPPED,
    reason=STOP_TIMEOUT,
    stage="stop",
    describe=lambda row: f"no outcome from {row.host} for stop {row.stop_id} of {row.gid} in time",
)


def of_requester(session: Session, requester: str, limit: int = 1000) -> list[Any]:
    """The spawns ``requester`` asked for, newest first."""
    t = spawn_requests_table
    query = select(t).where(t.c.requester == requester).order_by(t.c.sent_ms.desc())
    return list(session.execute(query.limit(limit)))


__all__ = [
    "FAILED", "PENDING", "SPAWN", "SPAWNED", "SPAWN_TIMEOUT", "STOP", "STOPPED", "STOP_TIMEOUT",
    "of_requester", "spawn_requests_table", "stop_requests_table",
]  # fmt: skip
