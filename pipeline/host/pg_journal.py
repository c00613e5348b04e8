"""The inject journal's two statements on PostgreSQL: one statement per burst, not per brief.

Each statement is a round trip on PostgreSQL, and a burst's briefs were one each. Here a
burst's opens are one multi-row ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (the msgIds it
wrote) and its closes one ``UPDATE ... FROM (VALUES ...)`` guarded by ``state = 'open'``
``RETURNING`` the msgIds it moved: the same rows and the same answers as a statement per row
(SQLite's forms, in :mod:`pipeline.host.inject_journal`, are one statement per burst too). The
close is the first statement of its transaction, so it rides with the ``BEGIN``
(:func:`pipeline.store.pg_pipeline.begin_with`) when the caller enabled that.

A close whose answer the caller can assume (every row still ``open``: nearly always, the
exception being a restart's report or a twin that moved a row first) need not wait for it:
:func:`close_all_or_fail` is the same ``UPDATE`` as a statement that fails, so nothing of its
transaction commits, unless it moved every row. It is sent ahead of the burst's receipts, in
their round trip, with the ``COMMIT`` (``pipeline/gateway/injection.py``); the caller that
meets its failure (:func:`not_all_open`) closes again the waiting way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from pipeline.runtime.driver_sql import fetch_column

_OPEN_ROW = "(%s, %s, %s, %s, %s, %s, %s)"
_OPEN_SQL = (
    "INSERT INTO fleet_inject_journal "
    "(msg_id, gid, sender, reply_host, trace_id, opened_ms, state) VALUES {rows} "
    "ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id"
)
_CLOSE_SQL = (
    "UPDATE fleet_inject_journal AS j SET state = v.state, closed_ms = %s "
    "FROM (VALUES {rows}) AS v (msg_id, state) "
    "WHERE j.msg_id = v.msg_id AND j.state = %s RETURNING j.msg_id"
)
NOT_ALL_OPEN_MARK = "fleet: journal rows not all open"
# the moved rows counted; a count short of the burst's fails the cast (the count is not a
# constant, so the planner does not fold the CAST and fail every time)
_CLOSE_ALL_OR_FAIL_SQL = (
    "WITH moved AS (" + _CLOSE_SQL + ") "
    "SELECT CASE WHEN count(*) = %s THEN 0 "
    f"ELSE CAST('{NOT_ALL_OPEN_MARK} ' || count(*) AS integer) END FROM moved"
)
# statement -> (its template, one row's placeholders): 0 open, 1 close, 2 close all or fail
_TEMPLATES = {
    0: (_OPEN_SQL, _OPEN_ROW),
    1: (_CLOSE_SQL, "(%s, %s)"),
    2: (_CLOSE_ALL_OR_FAIL_SQL, "(%s, %s)"),
}
_sql: dict[tuple[int, int], str] = {}


def _statement(which: int, n: int) -> str:
    sql = _sql.get((which, n))
    if sql is None:
        template, row = _TEMPLATES[which]
        sql = _sql[(which, n)] = template.format(rows=", ".join([row] * n))
    return sql


def open_many(conn: Connection, rows: Sequence[Sequence[Any]]) -> set[str]:
    """Write the rows (``msg_id, gid, sender, reply_host, trace_id, opened_ms, state``) not
    journaled yet; the msgIds written."""
    params = [value for row in rows for value in row]
    return set(fetch_column(conn, _statement(0, len(rows)), params))


def close_many(
    conn: Connection, moves: Sequence[tuple[str, str]], closed_ms: int, open_state: str
) -> set[str]:
    """Move each ``(msg_id, state)`` out of ``open_state``; the msgIds moved (a msgId listed
    twice moves once, to the first state listed, as the per-row statements do)."""
    first: dict[str, str] = {}
    for msg_id, state in moves:
        first.setdefault(msg_id, state)
    params: list[Any] = [closed_ms]
    for msg_id, state in first.items():
        params += (msg_id, state)
    params.append(open_state)
    return set(fetch_column(conn, _statement(1, len(first)), params))


def close_all_or_fail(
    moves: Sequence[tuple[str, str]], closed_ms: int, open_state: str
) -> tuple[str, list[Any]]:
    """The close of :func:`close_many` for ``moves`` (distinct msgIds) as one statement that
    fails, with :data:`NOT_ALL_OPEN_MARK` in its error, unless it moved every row: ``(sql,
    params)``, for a caller that sends it without reading its answer."""
    params: list[Any] = [closed_ms]
    for msg_id, state in moves:
        params += (msg_id, state)
    params += (open_state, len(moves))
    return _statement(2, len(moves)), params


def not_all_open(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error, or SQLAlchemy's around it) is
    :func:`close_all_or_fail`'s: a row of the burst was not open any more."""
    return NOT_ALL_OPEN_MARK in str(exc)
