"""The inject journal's raw DB-API statements on SQLite and PostgreSQL (R-ACK-3: a row
committed before the inject, moved out of ``open`` once, by whoever gets there first)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError

from pipeline.host import inject_journal as journal
from pipeline.store import make_engine, session_factory


def _entry(msg_id: str) -> journal.Entry:
    return journal.Entry(msg_id, "worker-b", "main-a", "A", "trace-1")


def test_open_writes_each_msg_id_once_and_close_moves_a_row_once(store_url: str) -> None:
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    try:
        with engine.begin() as conn:  # a plain connection, as a burst's rows open
            assert journal.open_many(conn, [_entry("m1"), _entry("m2")]) == {"m1", "m2"}
        with sessions.begin() as s:  # in a Session, as a close opens the next burst
            assert journal.open_many(s, [_entry("m1"), _entry("m3")]) == {"m3"}
            moves = [("m1", journal.INJECTED), ("m1", journal.FAILED), ("m9", journal.FAILED)]
            assert journal.close_many(s, moves) == [True, False, False]
        with sessions.begin() as s:
            assert journal.state_of(s, "m1") == journal.INJECTED
            assert [r.msg_id for r in journal.open_entries(s)] == ["m2", "m3"]
            assert journal.close_entry(s, "m2", journal.UNCERTAIN)
            assert not journal.open_entry(
                s, msg_id="m2", gid="w", sender="s", reply_host="h", trace_id="t"
            )
    finally:
        engine.dispose()


def test_a_statement_error_is_raised_as_sqlalchemy_raises_it(store_url: str) -> None:
    """with_retry and the callers catch SQLAlchemyError: the raw cursor's errors are wrapped."""
    engine = make_engine(store_url)
    try:
        with pytest.raises(DBAPIError), engine.begin() as conn:
            journal.open_many(conn, [journal.Entry("m1", "w", "s", "h", None)])  # type: ignore[arg-type]
    finally:
        engine.dispose()
