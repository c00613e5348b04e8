"""The runtime's batch transactions run on one held connection: each batch commits or rolls
back as a whole (R-ACK-2: the hold and its dedupe row in one transaction), and a batch that
failed gives its connection up, so the next starts on a fresh one (R-STORE-2). An ORM session
is made only when a step asks for one; it then commits the batch itself, and its factory's
``after_commit`` listeners run once the batch is durable."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from pipeline.runtime.batch_session import BatchSessions
from pipeline.store import make_engine, serialize_writes, session_factory


def test_batches_share_a_connection_commit_whole_and_a_failed_one_is_dropped(
    tmp_path: Path,
) -> None:
    engine = serialize_writes(make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}"))
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    batches = BatchSessions(sessions)
    with batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (1)"))
        first = tx.connection().connection.dbapi_connection
    with batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (2)"))
        assert tx.connection().connection.dbapi_connection is first, "held across batches"
    with pytest.raises(RuntimeError), batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (3)"))
        raise RuntimeError("the batch failed")
    with sessions.begin() as s:  # the write gate was let go: another writer gets in
        assert s.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2]
    with batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (4)"))
    with sessions() as s:
        assert s.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2, 4]
    batches.close()
    assert engine.pool.checkedout() == 0, "closed: the connection is back in the pool"
    engine.dispose()


def test_a_session_asked_for_joins_the_batch_and_its_listeners_see_it_committed(
    tmp_path: Path,
) -> None:
    engine = serialize_writes(make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}"))
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    seen: list[list[int]] = []  # what another connection reads when after_commit runs

    def after_commit(_session: Session) -> None:
        with engine.connect() as c:
            seen.append(list(c.execute(text("SELECT x FROM t ORDER BY x")).scalars()))

    event.listen(sessions, "after_commit", after_commit)
    batches = BatchSessions(sessions)
    with batches.begin() as tx:  # no session asked for: no session, no listener
        tx.connection().execute(text("INSERT INTO t VALUES (1)"))
    assert seen == []
    with batches.begin() as tx:  # the claim on the connection, a staged call on the session
        tx.connection().execute(text("INSERT INTO t VALUES (2)"))
        tx.session.execute(text("INSERT INTO t VALUES (3)"))
        assert tx.session.connection() is tx.connection(), "one transaction"
    assert seen == [[1, 2, 3]], "the listener ran after the COMMIT, once"
    with pytest.raises(RuntimeError), batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (4)"))
        tx.session.execute(text("INSERT INTO t VALUES (5)"))
        raise RuntimeError("the batch failed")
    assert seen == [[1, 2, 3]]
    with batches.begin() as tx:
        tx.session.execute(text("INSERT INTO t VALUES (6)"))
    assert seen == [[1, 2, 3], [1, 2, 3, 6]], "the whole failed batch rolled back"
    with batches.begin() as tx:  # a session asked for and left unused still commits the batch
        tx.connection().execute(text("INSERT INTO t VALUES (7)"))
        assert tx.session is not None
    assert seen[-1] == [1, 2, 3, 6, 7]
    batches.close()
    assert engine.pool.checkedout() == 0
    engine.dispose()


def test_on_sqlite_no_transaction_is_open_between_batches_and_another_writer_gets_in(
    tmp_path: Path,
) -> None:
    """R-ACK-2: each batch is its own DB-API transaction on the held connection; between
    batches none is open (no snapshot held, the write gate let go), so another writer commits
    and the next batch sees its row; a batch after a session's commit begins again."""
    engine = serialize_writes(make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}"))
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    batches = BatchSessions(sessions)
    for x in (1, 2):
        with batches.begin() as tx:
            tx.connection().execute(text("INSERT INTO t VALUES (:x)"), {"x": x})
            raw = tx.connection().connection.dbapi_connection
            assert raw is not None and raw.in_transaction
        assert not raw.in_transaction, "committed: nothing open between batches"
        with sessions.begin() as s:  # another writer, between batches
            s.execute(text("INSERT INTO t VALUES (:x)"), {"x": 10 + x})
    with batches.begin() as tx:
        tx.session.execute(text("INSERT INTO t VALUES (3)"))
    with batches.begin() as tx:
        rows = tx.connection().execute(text("SELECT x FROM t ORDER BY x")).scalars().all()
        assert rows == [1, 2, 3, 11, 12]
    with pytest.raises(RuntimeError), batches.begin() as tx:
        tx.connection().execute(text("INSERT INTO t VALUES (4)"))
        raise RuntimeError("the batch failed")
    with sessions() as s:
        assert s.execute(text("SELECT count(*) FROM t WHERE x = 4")).scalar_one() == 0
    batches.close()
    assert engine.pool.checkedout() == 0
    engine.dispose()
