"""The socket writer's group transactions on its held SQLite connection (writer_session.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from pipeline.errors import DeliveryError
from pipeline.gateway.writer_session import WriterSession
from pipeline.store import make_engine, serialize_writes, session_factory


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = serialize_writes(make_engine(f"sqlite:///{tmp_path}/s.db", create=False))
    with session_factory(engine).begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER PRIMARY KEY)"))
    return engine


def _rows(engine: Engine) -> list[int]:
    with session_factory(engine).begin() as s:
        return [x for (x,) in s.execute(text("SELECT x FROM t ORDER BY x"))]


def test_a_group_commits_and_a_refused_group_leaves_nothing_behind(engine: Engine) -> None:
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
        s.info["cached"] = True
    held = writer._session
    with pytest.raises(DeliveryError), writer.begin() as s:
        assert "cached" not in s.info  # what a group caches is for its own transaction
        s.execute(text("INSERT INTO t VALUES (2)"))
        raise DeliveryError("refused")
    assert _rows(engine) == [1]  # another connection writes and reads: no lock is left held
    with writer.begin() as s:
        assert s is held  # a refusal keeps the held connection
        s.execute(text("INSERT INTO t VALUES (3)"))
    assert _rows(engine) == [1, 3]
    writer.close()


def test_a_refused_savepoint_keeps_the_rest_of_its_group(engine: Engine) -> None:
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        for x in (1, 2, 3):
            try:
                with s.begin_nested():
                    s.execute(text(f"INSERT INTO t VALUES ({x})"))
                    if x == 2:
                        raise DeliveryError("refused")
            except DeliveryError:
                pass
    assert _rows(engine) == [1, 3]
    writer.close()


def test_a_store_error_rolls_back_and_the_next_group_opens_a_fresh_connection(
    engine: Engine,
) -> None:
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
    held = writer._session
    with pytest.raises(OperationalError), writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (2)"))
        s.execute(text("INSERT INTO nowhere VALUES (1)"))
    assert writer._session is None
    with writer.begin() as s:
        assert s is not held
        s.execute(text("INSERT INTO t VALUES (4)"))
    assert _rows(engine) == [1, 4]
    writer.close()
