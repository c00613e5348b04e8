"""The runtime's batch transactions run on one held connection: each batch commits or rolls
back as a whole (R-ACK-2: the hold and its dedupe row in one transaction), and a batch that
failed gives its connection up, so the next starts on a fresh one (R-STORE-2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

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
    with batches.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
        first = s.connection().connection.dbapi_connection
    with batches.begin() as s:
        s.execute(text("INSERT INTO t VALUES (2)"))
        assert s.connection().connection.dbapi_connection is first, "held across batches"
    with pytest.raises(RuntimeError), batches.begin() as s:
        s.execute(text("INSERT INTO t VALUES (3)"))
        raise RuntimeError("the batch failed")
    with sessions.begin() as s:  # the write gate was let go: another writer gets in
        assert s.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2]
    with batches.begin() as s:
        s.execute(text("INSERT INTO t VALUES (4)"))
    with sessions() as s:
        assert s.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2, 4]
    batches.close()
    assert engine.pool.checkedout() == 0, "closed: the connection is back in the pool"
    engine.dispose()
