"""Maintenance's look-first (pipeline/host/due.py) says "due" exactly when the duty it guards
has work: a tracked send pending past its deadline, a turn waiting past its expiry, an undrained
held message past its ``expiresAt`` -- and not for one answered, drained or not yet due. The
gateway asks on a connection it keeps between ticks (``dbapi.HeldReader``): each of its reads
sees what was committed before it, and a kept connection that died is replaced."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, update
from sqlalchemy.exc import DBAPIError

from pipeline.host import dbapi, due
from pipeline.host.conversations import ANSWERED, WAITING, turns_table
from pipeline.host.deadlines import PENDING
from pipeline.host.held import held_table
from pipeline.host.tracking import INJECTED, forward_table

NOW = 1_000_000


def _checks(sessions: Any, held: dbapi.HeldReader) -> tuple[bool, bool, bool]:
    """Each duty's own question; the tick's one-statement form (``due_now``) must agree, asked
    in a session and on the kept connection."""
    with sessions() as s:
        each = (
            due.overdue(s, forward_table, PENDING, NOW),
            due.turn_expired(s, NOW),
            due.held_expired(s, NOW),
        )
        at_once = due.due_now(s, (forward_table,), PENDING, NOW)
    assert (forward_table in at_once.overdue, at_once.turns, at_once.held) == each
    kept = due.due_now(held, (forward_table,), PENDING, NOW)
    assert kept == at_once
    return each


@pytest.fixture
def held(sessions: Any) -> Any:
    reader = dbapi.HeldReader(sessions.kw["bind"])
    yield reader
    reader.close()


def test_due_exactly_when_a_duty_has_work(sessions: Any, held: dbapi.HeldReader) -> None:
    assert _checks(sessions, held) == (False, False, False)
    with sessions.begin() as s:  # rows not yet due
        s.execute(insert(forward_table), _forward("f-later", NOW + 1))
        s.execute(insert(turns_table), _turn("t-later", NOW + 1))
        s.execute(insert(held_table), _held("h-later", NOW + 1))
    assert _checks(sessions, held) == (False, False, False)
    with sessions.begin() as s:  # due, then answered / drained: no work left
        s.execute(insert(forward_table), _forward("f-due", NOW - 1))
        s.execute(insert(turns_table), _turn("t-due", NOW - 1))
        s.execute(insert(held_table), _held("h-due", NOW - 1))
    # the kept connection holds no snapshot between two reads: it sees each commit
    assert _checks(sessions, held) == (True, True, True)
    with sessions.begin() as s:
        s.execute(update(forward_table).values(state=INJECTED))
        s.execute(update(turns_table).values(state=ANSWERED))
        s.execute(update(held_table).values(drained_at_ms=NOW))
    assert _checks(sessions, held) == (False, False, False)


def test_the_kept_connection_blocks_no_writer_and_stays_checked_out(
    sessions: Any, held: dbapi.HeldReader
) -> None:
    """Between two reads the kept connection is in no transaction: a writer commits at once
    (SQLite: no read lock pins the WAL; PostgreSQL: no snapshot kept open), and the reader holds
    one pooled connection until it is closed."""
    engine = sessions.kw["bind"]
    due.due_now(held, (forward_table,), PENDING, NOW)
    out = engine.pool.checkedout()
    assert out == 1
    if engine.dialect.name == "sqlite":  # a reader in a transaction pins the WAL: busy 1
        raw = engine.raw_connection()  # autocommit: a checkpoint runs outside a transaction
        try:
            assert raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        finally:
            raw.close()
    with engine.connect() as c:
        if engine.dialect.name != "sqlite":
            pid = held.fetchone(dbapi.Statement("SELECT pg_backend_pid() + {p}"), (0,))[0]
            state = c.exec_driver_sql(
                "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).scalar_one()
            assert state == "idle"  # not "idle in transaction"
    with sessions.begin() as s:
        s.execute(insert(held_table), _held("h-due", NOW - 1))
    assert due.due_now(held, (forward_table,), PENDING, NOW).held
    assert engine.pool.checkedout() == out
    held.close()
    assert engine.pool.checkedout() == out - 1


def test_a_kept_connection_that_died_is_replaced(sessions: Any, held: dbapi.HeldReader) -> None:
    """A kept connection that fails (a restarted PostgreSQL, a closed file) is dropped and the
    read runs once more on a fresh one; a read that fails on a fresh one is raised."""
    due.due_now(held, (forward_table,), PENDING, NOW)
    held._conn.dbapi_connection.close()
    with sessions.begin() as s:
        s.execute(insert(held_table), _held("h-due", NOW - 1))
    assert due.due_now(held, (forward_table,), PENDING, NOW).held
    bad = dbapi.Statement("SELECT no_such_column FROM fleet_held WHERE 1 = {p}")
    with pytest.raises(DBAPIError):
        held.fetchone(bad, (1,))
    assert due.due_now(held, (forward_table,), PENDING, NOW).held  # and it reads again


def _forward(msg_id: str, deadline_ms: int) -> dict[str, Any]:
    return {
        "msg_id": msg_id,
        "sender": "main-a",
        "recipient": "w-1",
        "trace_id": "t",
        "sent_ms": NOW - 10,
        "deadline_ms": deadline_ms,
        "state": PENDING,
    }


def _turn(turn_id: str, expires_at_ms: int) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "asker": "main-a",
        "asked": "w-1",
        "ask_msg_id": f"ask-{turn_id}",
        "opened_ms": NOW - 10,
        "expires_at_ms": expires_at_ms,
        "state": WAITING,
    }


def _held(msg_id: str, expires_at_ms: int) -> dict[str, Any]:
    return {
        "recipient": "main-b",
        "msg_id": msg_id,
        "kind": "REPLY",
        "sender": "main-a",
        "body": b"x",
        "ts_ms": NOW - 10,
        "expires_at_ms": expires_at_ms,
        "held_at_ms": NOW - 10,
    }
