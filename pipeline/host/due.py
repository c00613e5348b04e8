"""Maintenance's look-first: is anything due at all, in one DB-API statement per duty.

Every maintenance tick (twice a second) asks each duty whether it has work -- a tracked send past
its deadline (per tracked kind), a turn waiting past its ASK's expiry, a held message past its
``expiresAt`` -- before it takes the write lock. Almost always the answer is no. Asked through
the ORM (a ``select`` built and compiled per call, a result object, a session per question) the
five questions cost ~1.5 ms of CPU per tick on an idle store, more than the rest of the tick;
here each is plain SQL text on the read session's DB-API cursor (:mod:`pipeline.host.dbapi`),
with the same index behind it. :func:`due_now` asks all of them in one statement, on one read
session or on the gateway's :class:`~pipeline.host.dbapi.HeldReader` (no session at all), so an
idle tick is one round trip, and a duty runs (and asks again) only when it has work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Table
from sqlalchemy.orm import Session

from . import dbapi
from .conversations import WAITING, turns_table
from .held import held_table

_OVERDUE: dict[Table, dbapi.Statement] = {}
_TURN_EXPIRED = dbapi.Statement(
    f'SELECT 1 FROM "{turns_table.name}" WHERE state = {{p}} AND expires_at_ms < {{p}} LIMIT 1'
)
_HELD_EXPIRED = dbapi.Statement(
    f'SELECT 1 FROM "{held_table.name}" '
    "WHERE drained_at_ms IS NULL AND expires_at_ms < {p} LIMIT 1"
)


def _overdue_sql(table: Table) -> str:
    return f'SELECT 1 FROM "{table.name}" WHERE state = {{p}} AND deadline_ms < {{p}} LIMIT 1'


def overdue(session: Session, table: Table, pending: str, now_ms: int) -> bool:
    """Whether a row of the tracked ``table`` is still ``pending`` past its deadline."""
    statement = _OVERDUE.get(table)
    if statement is None:
        statement = _OVERDUE[table] = dbapi.Statement(_overdue_sql(table))
    return dbapi.fetchone(session, statement, (pending, now_ms)) is not None


def turn_expired(session: Session, now_ms: int) -> bool:
    """Whether a turn is still waiting past its ASK's ``expiresAt``."""
    return dbapi.fetchone(session, _TURN_EXPIRED, (WAITING, now_ms)) is not None


def held_expired(session: Session, now_ms: int) -> bool:
    """Whether an undrained held message is past its ``expiresAt``."""
    return dbapi.fetchone(session, _HELD_EXPIRED, (now_ms,)) is not None


@dataclass(frozen=True, slots=True)
class Due:
    """Which of maintenance's store duties have work now."""

    overdue: tuple[Table, ...]  # the tracked tables with a pending row past its deadline
    turns: bool  # a turn waiting past its ASK's expiry
    held: bool  # an undrained held message past its ``expiresAt``


_DUE_NOW: dict[tuple[Table, ...], dbapi.Statement] = {}


def due_now(
    session: Session | dbapi.HeldReader, tracked: Sequence[Table], pending: str, now_ms: int
) -> Due:
    """:func:`overdue` for each tracked table, :func:`turn_expired` and :func:`held_expired`,
    asked in one statement."""
    tables = tuple(tracked)
    statement = _DUE_NOW.get(tables)
    if statement is None:
        parts = [_exists(_overdue_sql(t)) for t in tables]
        parts += [_exists(_TURN_EXPIRED.text), _exists(_HELD_EXPIRED.text)]
        statement = _DUE_NOW[tables] = dbapi.Statement("SELECT " + ", ".join(parts))
    params: list[object] = []
    for _ in tables:
        params += (pending, now_ms)
    params += (WAITING, now_ms, now_ms)
    row = dbapi.fetchone(session, statement, params)
    n = len(tables)
    return Due(
        overdue=tuple(t for t, hit in zip(tables, row[:n], strict=True) if hit),
        turns=bool(row[n]),
        held=bool(row[n + 1]),
    )


def _exists(select_sql: str) -> str:
    return f"EXISTS ({select_sql})"
