"""The inject queue's SQLite transactions on its held DB-API connection (gateway/journal_tx.py):
a transaction that raises leaves nothing behind, and a store that refuses the ``BEGIN`` is
reported as SQLAlchemy reports it, so ``with_retry`` retries it (R-STORE-2) and the journal's
rows stay exactly what was committed (R-ACK-3)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.exc import OperationalError

from pipeline.gateway.journal_tx import JournalTx
from pipeline.host import inject_journal as journal
from pipeline.store import is_transient, make_engine, serialize_writes, session_factory


def _entry(msg_id: str) -> journal.Entry:
    return journal.Entry(msg_id, "worker-b", "main-a", "A", "trace-1")


def _journaled(engine: Engine) -> set[str]:
    with engine.connect() as c:
        return {r.msg_id for r in c.execute(select(journal.journal_table.c.msg_id))}


@pytest.fixture
def db(tmp_path: Path) -> Any:
    path = tmp_path / "B.sqlite"
    engine = serialize_writes(make_engine(f"sqlite:///{path}"))

    @event.listens_for(engine, "connect")
    def _no_wait(dbapi_conn: Any, _record: Any) -> None:  # a locked store refuses at once
        dbapi_conn.execute("PRAGMA busy_timeout=0")

    engine.dispose()  # the schema check's pooled connection goes: every new one has the pragma
    yield engine, path
    engine.dispose()


def test_a_transaction_that_raises_is_rolled_back_and_the_next_one_commits(db: Any) -> None:
    engine, _ = db
    tx = JournalTx(session_factory(engine))
    try:
        with tx.begin() as conn:
            assert journal.open_many(conn, [_entry("m1")]) == {"m1"}
        with pytest.raises(RuntimeError), tx.begin() as conn:
            journal.open_many(conn, [_entry("m2")])
            raise RuntimeError("the worker failed mid-transaction")
        with tx.begin() as conn:
            assert journal.open_many(conn, [_entry("m3")]) == {"m3"}
        assert _journaled(engine) == {"m1", "m3"}
    finally:
        tx.close()


def test_a_begin_refused_by_a_locked_store_is_a_transient_sqlalchemy_error(db: Any) -> None:
    engine, path = db
    tx = JournalTx(session_factory(engine))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        with tx.begin() as conn:  # the held connection is open before the lock is taken
            journal.open_many(conn, [_entry("m1")])
        other.execute("BEGIN IMMEDIATE")  # another process writes
        with pytest.raises(OperationalError) as refused, tx.begin():
            pass
        assert is_transient(refused.value)  # with_retry tries it again
        other.execute("ROLLBACK")
        with tx.begin() as conn:
            assert journal.open_many(conn, [_entry("m2")]) == {"m2"}
        assert _journaled(engine) == {"m1", "m2"}
    finally:
        other.close()
        tx.close()
