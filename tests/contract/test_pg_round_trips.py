"""PostgreSQL's fewer round trips keep the transactions they shorten (R-ACK-2, R-ACK-8, R-ACK-3).

A batch's ``BEGIN`` rides with its dedupe claim and its staged rows with its ``COMMIT``
(``pipeline.store.pg_pipeline``); the journal's close rides with its ``BEGIN``; the relay's
ack commits without waiting for the WAL flush. None of it may split a transaction, commit part
of one, or leave a pooled connection in autocommit or with the ack's setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import DBAPIError

from pipeline.control import SPAWN
from pipeline.host import deadlines
from pipeline.host import inject_journal as journal
from pipeline.host.held import held_table
from pipeline.host.tracking import FORWARD
from pipeline.outbox import write
from pipeline.outbox.acker import Acker
from pipeline.outbox.tables import outbox_sent
from pipeline.runtime.batch_session import BatchSessions
from pipeline.runtime.dedupe import claim_ids, dedupe_table
from pipeline.runtime.staging import Staged
from pipeline.store import make_engine, pg_pipeline, session_factory


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    if not store_url.startswith("postgresql"):
        pytest.skip("round trips saved on PostgreSQL only")
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


def _held(msg_id: str, recipient: str | None = "main-b") -> dict[str, Any]:
    return {
        "recipient": recipient,
        "msg_id": msg_id,
        "kind": "REPLY",
        "sender": "main-a",
        "trace_id": "t",
        "turn_id": None,
        "body": b"x",
        "headers": b"",
        "topic": "t",
        "ts_ms": 1,
        "expires_at_ms": 2,
        "held_at_ms": 3,
    }


def _batch(batches: BatchSessions, msg_id: str, row: dict[str, Any]) -> set[str]:
    with batches.begin() as session:
        claimed = claim_ids(session.connection(), "scope", [msg_id], 1)
        staged = Staged()
        if claimed:  # a duplicate is dropped, as the runtime drops it
            staged.insert(held_table, row)
        staged.flush(session)
    return claimed


def _count(engine: Engine, table: Any, msg_id: str) -> int:
    with engine.connect() as conn:
        return len(conn.execute(select(table.c.msg_id).where(table.c.msg_id == msg_id)).all())


def test_a_batch_commits_its_claim_and_rows_together_and_the_connection_stays_transactional(
    engine: Engine,
) -> None:
    """R-ACK-8: the held row and the dedupe row in one transaction, the BEGIN explicit."""
    batches = BatchSessions(session_factory(engine))
    try:
        assert _batch(batches, "m1", _held("m1")) == {"m1"}
        assert _batch(batches, "m1", _held("m1")) == set()  # a redelivery: claimed before
        assert _count(engine, held_table, "m1") == 1
        assert _count(engine, dedupe_table, "m1") == 1
        held = batches._conn
        assert held is not None and held.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
    finally:
        batches.close()
    with engine.connect() as conn:  # whatever the pool hands out begins its own transactions
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]


def test_a_staged_row_that_fails_with_the_commit_commits_nothing_of_the_batch(
    engine: Engine,
) -> None:
    """R-ACK-2: a batch whose write fails leaves neither its dedupe row nor any effect, so a
    redelivery applies it; the error is SQLAlchemy's, as the batch's backoff expects."""
    batches = BatchSessions(session_factory(engine))
    try:
        with pytest.raises(DBAPIError):  # recipient NOT NULL: fails in the COMMIT's pipeline
            _batch(batches, "m2", _held("m2", recipient=None))
        assert _count(engine, dedupe_table, "m2") == 0
        assert _batch(batches, "m2", _held("m2")) == {"m2"}  # the redelivery applies it
        assert _count(engine, held_table, "m2") == 1
    finally:
        batches.close()
    with engine.connect() as conn:
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]


def test_a_journal_close_riding_with_begin_rolls_back_with_its_transaction(
    engine: Engine,
) -> None:
    """R-ACK-3: the close and its receipt are one transaction; a failure after the close
    leaves the row open (reported uncertain at restart), never closed without its receipt."""
    entry = journal.Entry("j1", "worker-b", "main-a", "A", "trace")
    with engine.begin() as conn:
        assert journal.open_many(conn, [entry]) == {"j1"}
    with pytest.raises(RuntimeError), pg_pipeline.transaction(engine) as conn:
        assert journal.close_many(conn, [("j1", journal.INJECTED)]) == [True]
        raise RuntimeError("the receipt could not be staged")
    with session_factory(engine).begin() as s:
        assert journal.state_of(s, "j1") == journal.OPEN
    with pg_pipeline.transaction(engine) as conn:
        assert journal.close_many(conn, [("j1", journal.INJECTED)]) == [True]
    with session_factory(engine).begin() as s:
        assert journal.state_of(s, "j1") == journal.INJECTED


def test_the_relay_ack_moves_the_watermark_and_leaves_no_setting_behind(engine: Engine) -> None:
    """R-OUT-4: the ack moves the watermark over the confirmed run only; its commit's
    ``synchronous_commit off`` is the transaction's own, not the pooled connection's."""
    sessions = session_factory(engine)
    with sessions.begin() as s:
        for _ in range(3):
            write(s, topic="t", key=b"k", value=b"v", branch_key="b1")
    Acker(engine).ack([(1, "default", "b1", 1), (2, "default", "b1", 2)])
    with engine.connect() as conn:
        sent = conn.execute(
            select(outbox_sent.c.sent_lsn).where(outbox_sent.c.branch_key == "b1")
        ).scalar_one()
        assert sent == 2
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]


def test_a_claims_only_commit_is_committed_and_its_setting_ends_with_it(engine: Engine) -> None:
    """R-ACK-8: a batch that wrote only its claims commits them (without the WAL wait); the
    setting is the transaction's own, the held connection's next batch flushes as before."""
    batches = BatchSessions(session_factory(engine))
    try:
        with batches.begin() as session:
            assert claim_ids(session.connection(), "scope", ["c1"], 1) == {"c1"}
            pg_pipeline.claims_only(session.connection())
        assert _count(engine, dedupe_table, "c1") == 1
        with batches.begin() as session:
            setting = session.connection().exec_driver_sql("SHOW synchronous_commit")
            assert setting.scalar_one() == "on"
    finally:
        batches.close()


def test_receipts_settled_with_the_commit_end_as_one_settle_per_answer_did(
    engine: Engine, tmp_path: Path
) -> None:
    """R-ACK-5: in a batch that sends its writes with its COMMIT the settles have no RETURNING
    to narrow the next kind's; the rows end as the per-answer path leaves them (here on SQLite,
    the same answers, the same tracked sends)."""
    from tests.unit.test_receipts_batched import ANSWERS, KINDS, _rows, _store

    one_by_one = _store(tmp_path / "one.sqlite")
    with one_by_one.begin() as s:
        for a in ANSWERS:
            deadlines.settle_answer(s, KINDS, a.msg_id, injected=a.injected, reason=a.reason)
    sessions = session_factory(engine)
    common = {"trace_id": "t", "sent_ms": 1, "deadline_ms": 10_000}
    with sessions.begin() as s:
        for msg_id in ("f1", "f2", "f3"):
            deadlines.track(s, FORWARD, msg_id=msg_id, sender="main-a", recipient="w-1", **common)
        for msg_id in ("s1", "s2"):
            deadlines.track(
                s, SPAWN, msg_id=msg_id, spawn_id=f"w-{msg_id}", requester="main-a",
                host="B", profile="shell", **common,
            )  # fmt: skip
        deadlines.settle(s, FORWARD, "f3", deadlines.FAILED, "INJECT_TIMEOUT")
    batches = BatchSessions(sessions)
    try:
        with batches.begin() as session:
            claim_ids(session.connection(), "scope", ["r1"], 1)
            deadlines.settle_answers(session.connection(), KINDS, ANSWERS)
            assert pg_pipeline.state(session.connection()).writes  # type: ignore[union-attr]
    finally:
        batches.close()
    assert _rows(sessions) == _rows(one_by_one)


def test_writes_deferred_to_the_commit_alone_are_one_transaction(engine: Engine) -> None:
    """R-ACK-2: a transaction whose only statements ride with its COMMIT still begins one:
    a row that fails takes the rows before it with it."""
    sql = pg_pipeline.insert_sql(dedupe_table, ("scope", "msg_id", "seen_at_ms"), engine.dialect)
    with pytest.raises(DBAPIError), pg_pipeline.transaction(engine) as conn:
        assert pg_pipeline.defer(conn, sql, [("scope", "d1", 1), ("scope", "d1", 1)])
    assert _count(engine, dedupe_table, "d1") == 0
    with pg_pipeline.transaction(engine) as conn:
        assert pg_pipeline.defer(conn, sql, [("scope", "d2", 1)])
    assert _count(engine, dedupe_table, "d2") == 1


def test_a_batch_s_held_rows_ride_with_its_commit_beside_its_settled_receipts(
    engine: Engine,
) -> None:
    """R-ACK-8 and R-ACK-5: a batch that holds an ``INJECTED`` and settles the tracked send it
    is about (a ``call_each``, which reads no held row) sends both with its ``COMMIT``: no
    round trip for the held rows of their own, and still one transaction, both or neither."""
    sessions = session_factory(engine)
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="f9", sender="main-a", recipient="w-1", trace_id="t",
                        sent_ms=1, deadline_ms=10_000)  # fmt: skip

    def settle(conn: Any, answers: list[deadlines.Answer]) -> None:
        deadlines.settle_answers(conn, (FORWARD,), answers)

    def batch(row: dict[str, Any]) -> None:
        with batches.begin() as session:
            claim_ids(session.connection(), "scope", ["h9"], 1)
            staged = Staged()
            staged.insert(held_table, row)
            staged.call_each(settle, deadlines.Answer("f9", True, ""))
            staged.flush(session)
            kept = pg_pipeline.state(session.connection())
            assert kept is not None and len(kept.writes) == 2, "the held row and the settle wait"

    def tracked_state() -> str:
        with engine.connect() as conn:
            t = FORWARD.table
            return str(conn.execute(select(t.c.state).where(t.c.msg_id == "f9")).scalar_one())

    batches = BatchSessions(sessions)
    try:
        with pytest.raises(DBAPIError):  # recipient NOT NULL: fails in the COMMIT's pipeline
            batch(_held("h9", recipient=None))
        assert (_count(engine, held_table, "h9"), _count(engine, dedupe_table, "h9")) == (0, 0)
        assert tracked_state() == deadlines.PENDING, "the settle rolled back with the row"
        batch(_held("h9"))
        assert (_count(engine, held_table, "h9"), _count(engine, dedupe_table, "h9")) == (1, 1)
        assert tracked_state() == FORWARD.answered
    finally:
        batches.close()


def test_a_batch_s_read_ahead_goes_in_its_claim_s_round_trip(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-ACK-5 and R-ACK-8: the receipts' tracked states, read before the dedupe claim, go in
    the claim's round trip (with its ``BEGIN``) and are the states the transaction sees; a
    read that no claim carried reads itself when asked, in the same transaction."""
    from pipeline.store import pg_wire

    sessions = session_factory(engine)
    common = {"sender": "main-a", "recipient": "w-1", "trace_id": "t", "sent_ms": 1,
              "deadline_ms": 10_000}  # fmt: skip
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="f7", **common)
    trips: list[int] = []  # statements per round trip on libpq's pipeline
    real = pg_wire.run_rows
    monkeypatch.setattr(
        pg_wire, "run_rows", lambda *a, **k: trips.append(len(a[1])) or real(*a, **k)
    )
    batches = BatchSessions(sessions)
    try:
        with batches.begin() as session:
            conn = session.connection()
            states = deadlines.states_of(conn, (FORWARD, SPAWN), ["f7", "nope"])
            assert trips == [], "nothing sent before the claim"
            assert claim_ids(conn, "scope", ["r7"], 1) == {"r7"}
            assert trips == [3], "BEGIN, the read and the claim: one round trip"
            assert dict(states) == {"f7": deadlines.Sent(deadlines.PENDING, None), "nope": None}
            assert trips == [3]
            deadlines.settle(session.session, FORWARD, "f7", deadlines.FAILED, "INJECT_TIMEOUT")
        trips.clear()
        with batches.begin() as session:
            conn = session.connection()
            states = deadlines.states_of(conn, (FORWARD,), ["f7"])
            assert states["f7"] == (deadlines.FAILED, None), "no claim carried it: read when asked"
            assert trips == [2], "with the BEGIN it sent itself"
            assert claim_ids(conn, "scope", ["r8"], 1) == {"r8"}  # the transaction goes on
    finally:
        batches.close()
    assert _count(engine, dedupe_table, "r7") == _count(engine, dedupe_table, "r8") == 1
