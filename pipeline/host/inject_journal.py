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
from typing import Any

from sqlalchemy import BigInteger, Column, String, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.store import metadata
from pipeline.support.clock import now_ms

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


# Built once (the compiled form is cached by SQLAlchemy): the journal costs two statements per
# inject on the forward path's hot loop, so none is rebuilt per call.
_OPEN = {
    "sqlite": sqlite.insert(journal_table).on_conflict_do_nothing(),
    "postgresql": postgresql.insert(journal_table).on_conflict_do_nothing(),
}
_CLOSE = (
    update(journal_table)
    .where(journal_table.c.msg_id == bindparam("b_msg_id"), journal_table.c.state == OPEN)
    .values(state=bindparam("b_state"), closed_ms=bindparam("b_closed_ms"))
)


def open_entry(
    session: Session, *, msg_id: str, gid: str, sender: str, reply_host: str, trace_id: str
) -> bool:
    """Record "about to inject ``msg_id``" (the caller commits before injecting). False when
    the msgId is already journaled: it was attempted before, and is not injected again."""
    stmt = _OPEN[session.get_bind().dialect.name]
    row = {
        "msg_id": msg_id,
        "gid": gid,
        "sender": sender,
        "reply_host": reply_host,
        "trace_id": trace_id,
        "opened_ms": now_ms(),
        "state": OPEN,
    }
    return bool(getattr(session.execute(stmt, row), "rowcount", 0))


def close_entry(session: Session, msg_id: str, state: str) -> bool:
    """Move ``msg_id`` out of ``open``; False when it was not open (a restart's report or a
    twin got there first: the caller then stages no receipt)."""
    assert state in CLOSED, state
    params = {"b_msg_id": msg_id, "b_state": state, "b_closed_ms": now_ms()}
    return bool(getattr(session.execute(_CLOSE, params), "rowcount", 0))


def open_entries(session: Session, limit: int = 500) -> Sequence[Any]:
    t = journal_table
    query = select(t).where(t.c.state == OPEN).order_by(t.c.opened_ms).limit(limit)
    return list(session.execute(query))


def state_of(session: Session, msg_id: str) -> str | None:
    row = session.execute(
        select(journal_table.c.state).where(journal_table.c.msg_id == msg_id)
    ).first()
    return None if row is None else str(row.state)
