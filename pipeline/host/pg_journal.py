"""The inject journal's two statements on PostgreSQL: one statement per burst, not per brief.

Each statement is a round trip on PostgreSQL, and a burst's briefs were one each. Here a
burst's opens are one multi-row ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (the msgIds it
wrote) and its closes one ``UPDATE ... FROM (VALUES ...)`` guarded by ``state = 'open'``
``RETURNING`` the msgIds it moved: the same rows and the same answers as a statement per row
(SQLite's forms, in :mod:`pipeline.host.inject_journal`, are one statement per burst too). The
close is the first statement of its transaction, so it rides with the ``BEGIN``
(:func:`pipeline.store.pg_pipeline.begin_with`) when the caller enabled that.
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
_sql: dict[tuple[int, int], str] = {}


def _statement(which: int, n: int) -> str:
    sql = _sql.get((which, n))
    if sql is None:
        template, row = (_OPEN_SQL, _OPEN_ROW) if which == 0 else (_CLOSE_SQL, "(%s, %s)")
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
