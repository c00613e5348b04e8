"""The inject journal: the forward path's record of "about to inject this brief" (R-ACK-3).

An inject into a terminal is not transactional, so the gateway cannot inject and record it in
one step. The journal narrows what a crash can leave unknown to exactly one inject per entity,
and makes that one *reported as uncertain*, never as a false "not injected":

1. ``open`` -- a row (``open``) committed right before the first inject attempt of a tracked
   brief (``SEND``/``ANSWER`` whose sender waits for ``INJECTED``);
2. the inject;
3. ``close`` -- one transaction moves the row out of ``open`` (``injected``, ``failed`` or
   ``dropped``) *and* stages the receipt (``INJECTED``/``FAILED``; none for ``dropped``, a
   brief never attempted because the gateway is stopping: the sender's deadline reports it).

A crash before 1 leaves no row: the brief was not injected and the sender's ``INJECT_TIMEOUT``
says so truthfully. A crash between 1 and 3 leaves the row ``open``: on its next start the
gateway (:func:`report_open`) moves every open row to ``uncertain`` and stages, in the same
transaction, an ``INJECTED`` with stage ``uncertain`` for its sender ("may have been
injected"): the sender's tracker records ``uncertain``, apart from ``injected`` and from
``INJECT_TIMEOUT`` (``docs/gateway.md``, the forward path's invariants).

Every move out of ``open`` is a conditional update, and the receipt is staged only when the move
happened: whoever moves a row first (the injecting worker, or a restart's report) sends its one
outcome, never both. A msgId already in the journal is never injected again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Column, Connection, String, Table, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from pipeline.store import metadata
from pipeline.support.clock import now_ms

from . import pg_journal

OPEN, INJECTED, FAILED, DROPPED, UNCERTAIN = "open", "injected", "failed", "dropped", "uncertain"
CLOSED = (INJECTED, FAILED, DROPPED, UNCERTAIN)
STAGE_UNCERTAIN = "uncertain"  # the INJECTED body's stage of a restart's report

journal_table = Table(
    "fleet_inject_journal",
    metadata,
    Column("msg_id", String(255), primary_key=True),
    Column("gid", String(255), nullable=False),
    Column("sender", String(255), nullable=False),
    Column("reply_host", String(255), nullable=False),
    Column("trace_id", String(255), nullable=False),
    Column("opened_ms", BigInteger, nullable=False),
    Column("closed_ms", BigInteger, nullable=True, index=True),
    Column("state", String(16), nullable=False, index=True),  # open | injected | ... (CLOSED)
)


# The journal costs two statements per brief on the forward path's hot loop. Both are DB-API
# text, run on the raw cursor of the caller's connection (so in its transaction; the same way
# as ``pipeline.outbox.writer``), with a DB-API error raised as SQLAlchemy would
# (``DBAPIError.instance``: ``with_retry`` and callers catch SQLAlchemyError). SQLAlchemy's
# per-statement compile, ORM execute and result work cost several times the SQL itself. Both
# statements are portable (SQLite >= 3.24 and PostgreSQL share the upsert syntax).
_OPEN_SQL = (
    "INSERT INTO fleet_inject_journal "
    "(msg_id, gid, sender, reply_host, trace_id, opened_ms, state) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (msg_id) DO NOTHING"
)
_CLOSE_SQL = (
    "UPDATE fleet_inject_journal SET state = {p}, closed_ms = {p} "
    "WHERE msg_id = {p} AND state = {p}"
)
_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}
_sql: dict[str, tuple[str, str]] = {}


class Entry(NamedTuple):
    """One brief about to be injected: the row :func:`open_many` writes."""

    msg_id: str
    gid: str
    sender: str
    reply_host: str
    trace_id: str


def open_entry(
    session: Session | Connection,
    *,
    msg_id: str,
    gid: str,
    sender: str,
    reply_host: str,
    trace_id: str,
) -> bool:
    """Record "about to inject ``msg_id``" (the caller commits before injecting). False when
    the msgId is already journaled: it was attempted before, and is not injected again."""
    entry = Entry(msg_id, gid, sender, reply_host, trace_id)
    return bool(open_many(session, [entry]))


def open_many(session: Session | Connection, entries: Sequence[Entry]) -> set[str]:
    """:func:`open_entry` for each of ``entries``, in the caller's transaction; the msgIds
    whose row this call wrote (a msgId missing from it was journaled before)."""
    if not entries:
        return set()
    opened_ms = now_ms()
    rows = [(*e, opened_ms, OPEN) for e in entries]
    conn = session.connection() if isinstance(session, Session) else session
    if conn.dialect.name == "postgresql":  # one statement for the burst (pg_journal.py)
        return pg_journal.open_many(conn, rows)
    counts = _each(conn, 0, rows)
    return {e.msg_id for e, n in zip(entries, counts, strict=True) if n}


def close_entry(session: Session | Connection, msg_id: str, state: str) -> bool:
    """Move ``msg_id`` out of ``open``; False when it was not open (a restart's report or a
    twin got there first: the caller then stages no receipt)."""
    return close_many(session, [(msg_id, state)])[0]


def close_many(session: Session | Connection, moves: Sequence[tuple[str, str]]) -> list[bool]:
    """:func:`close_entry` for each ``(msg_id, state)``, in the caller's transaction; per move,
    whether it happened."""
    for _, state in moves:
        assert state in CLOSED, state
    closed_ms = now_ms()
    if not moves:
        return []
    conn = session.connection() if isinstance(session, Session) else session
    if conn.dialect.name == "postgresql":  # one statement for the burst (pg_journal.py)
        moved = pg_journal.close_many(conn, moves, closed_ms, OPEN)
        out = []
        for msg_id, _ in moves:
            out.append(msg_id in moved)
            moved.discard(msg_id)  # listed again: its row is closed already
        return out
    counts = _each(conn, 1, [(state, closed_ms, msg_id, OPEN) for msg_id, state in moves])
    return [bool(n) for n in counts]


def _each(session: Session | Connection, which: int, rows: list[tuple[Any, ...]]) -> list[int]:
    """Run statement ``which`` (0 open, 1 close) once per row on one raw cursor of the
    caller's connection; each row's rowcount."""
    conn = session.connection() if isinstance(session, Session) else session
    statement = _statements(conn.dialect.paramstyle)[which]
    dbapi_error = conn.dialect.loaded_dbapi.Error
    params: tuple[Any, ...] = ()
    counts = []
    try:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            for params in rows:
                cursor.execute(statement, params)
                counts.append(cursor.rowcount)
        finally:
            cursor.close()
    except dbapi_error as exc:  # as SQLAlchemy raises it: callers catch SQLAlchemyError
        raise DBAPIError.instance(
            statement, params, exc, dbapi_error, dialect=conn.dialect
        ) from exc
    return counts


def _statements(paramstyle: str) -> tuple[str, str]:
    sql = _sql.get(paramstyle)
    if sql is None:
        p = _PLACEHOLDER.get(paramstyle)
        if p is None:
            raise ValueError(f"inject journal: unsupported DB-API paramstyle {paramstyle!r}")
        sql = _sql[paramstyle] = (_OPEN_SQL.format(p=p), _CLOSE_SQL.format(p=p))
    return sql


def open_entries(session: Session, limit: int = 500) -> Sequence[Any]:
    t = journal_table
    query = select(t).where(t.c.state == OPEN).order_by(t.c.opened_ms).limit(limit)
    return list(session.execute(query))


def state_of(session: Session, msg_id: str) -> str | None:
    row = session.execute(
        select(journal_table.c.state).where(journal_table.c.msg_id == msg_id)
    ).first()
    return None if row is None else str(row.state)
