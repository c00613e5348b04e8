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

from sqlalchemy import BigInteger, Column, Connection, Index, String, Table, literal_column, select
from sqlalchemy.orm import Session

from pipeline.runtime.driver_sql import fetch_column
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
    Column("closed_ms", BigInteger, nullable=True),
    Column("state", String(16), nullable=False),  # open | injected | ... (CLOSED)
)
# The state as a literal where a query must find the open rows through the partial index below
# (SQLite uses a partial index only when the query's terms imply its condition as written, and
# a bound parameter implies nothing).
IS_OPEN = journal_table.c.state == literal_column(f"'{OPEN}'")
# Two partial indexes (revision 0018_journal_partial_indexes): the open rows by age (a
# restart's report, the gauge of briefs being injected) and the closed ones by their close
# (retention's purge). A row enters the first when it opens and leaves it when it closes, and
# enters the second then; full indexes on ``state`` and ``closed_ms`` wrote two entries more
# per brief (the state's old and new value, the NULL close) into pages of their own.
Index(
    "ix_fleet_inject_journal_open", journal_table.c.opened_ms,
    sqlite_where=IS_OPEN, postgresql_where=IS_OPEN,
)  # fmt: skip
_CLOSED = journal_table.c.closed_ms.is_not(None)
Index(
    "ix_fleet_inject_journal_closed", journal_table.c.closed_ms,
    sqlite_where=_CLOSED, postgresql_where=_CLOSED,
)  # fmt: skip


# A burst's journal rows open in one statement and close in one (per outcome state: nearly
# always one), run on the raw cursor of the caller's connection (so in its transaction; the
# same way as ``pipeline.outbox.writer``), with a DB-API error raised as SQLAlchemy would
# (``driver_sql.fetch_column``: ``with_retry`` and callers catch SQLAlchemyError). A statement
# per brief cost its own execute, and SQLAlchemy's per-statement compile, ORM execute and result
# work cost several times the SQL itself. PostgreSQL has its own forms (pg_journal.py); SQLite
# takes ``RETURNING`` (>= 3.35, as the outbox writer's upsert already needs).
_OPEN_ROW = "(?, ?, ?, ?, ?, ?, ?)"
_OPEN_SQL = (
    "INSERT INTO fleet_inject_journal "
    "(msg_id, gid, sender, reply_host, trace_id, opened_ms, state) VALUES {rows} "
    "ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id"
)
# ``+state``: found by msgId (its primary key), never through the state index, which the
# planner would otherwise pick and then walk every open row
_CLOSE_SQL = (
    "UPDATE fleet_inject_journal SET state = ?, closed_ms = ? "
    "WHERE msg_id IN ({ids}) AND +state = ? RETURNING msg_id"
)
_CHUNK = 100  # rows per statement: far below SQLite's bound on parameters
_sql: dict[tuple[int, int], str] = {}


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
    opened: set[str] = set()
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        params = [value for row in chunk for value in row]
        opened.update(fetch_column(conn, _statement(0, len(chunk)), params))
    return opened


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
    else:
        moved = _close_sqlite(conn, moves, closed_ms)
    out = []
    for msg_id, _ in moves:
        out.append(msg_id in moved)
        moved.discard(msg_id)  # listed again: its row is closed already
    return out


def close_with_commit(
    session: Session | Connection, moves: Sequence[tuple[str, str]]
) -> tuple[str, list[list[Any]]] | None:
    """On PostgreSQL, for ``moves`` with distinct msgIds: :func:`close_many` as a write whose
    answer is not read (``(DB-API SQL, [params])``), to be sent ahead of the transaction's last
    rows and its ``COMMIT`` in one round trip (``outbox.write_branch``'s ``before``). It fails,
    and nothing of the transaction commits, unless every row moved (:func:`not_all_open` says
    so): the caller then closes again with :func:`close_many`. None where it does not apply
    (SQLite, whose statements are not round trips; a msgId listed twice; nothing to move)."""
    conn = session.connection() if isinstance(session, Session) else session
    if not moves or conn.dialect.name != "postgresql":
        return None
    if len({msg_id for msg_id, _ in moves}) != len(moves):
        return None
    for _, state in moves:
        assert state in CLOSED, state
    sql, params = pg_journal.close_all_or_fail(moves, now_ms(), OPEN)
    return sql, [params]


not_all_open = pg_journal.not_all_open


def _close_sqlite(conn: Connection, moves: Sequence[tuple[str, str]], closed_ms: int) -> set[str]:
    """The msgIds moved: one statement per state (a burst's closes share one, ``injected``);
    a msgId listed twice moves once, to the first state listed, as a statement per row did."""
    first: dict[str, str] = {}
    for msg_id, state in moves:
        first.setdefault(msg_id, state)
    by_state: dict[str, list[str]] = {}
    for msg_id, state in first.items():
        by_state.setdefault(state, []).append(msg_id)
    moved: set[str] = set()
    for state, ids in by_state.items():
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            params = [state, closed_ms, *chunk, OPEN]
            moved.update(fetch_column(conn, _statement(1, len(chunk)), params))
    return moved


def _statement(which: int, n: int) -> str:
    """SQLite's statement ``which`` (0 open, 1 close) for ``n`` rows (msgIds)."""
    sql = _sql.get((which, n))
    if sql is None:
        if which == 0:
            sql = _OPEN_SQL.format(rows=", ".join([_OPEN_ROW] * n))
        else:
            sql = _CLOSE_SQL.format(ids=", ".join(["?"] * n))
        _sql[(which, n)] = sql
    return sql


def open_entries(session: Session, limit: int = 500) -> Sequence[Any]:
    t = journal_table
    query = select(t).where(IS_OPEN).order_by(t.c.opened_ms).limit(limit)
    return list(session.execute(query))


def state_of(session: Session, msg_id: str) -> str | None:
    row = session.execute(
        select(journal_table.c.state).where(journal_table.c.msg_id == msg_id)
    ).first()
    return None if row is None else str(row.state)
