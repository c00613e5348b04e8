"""The socket writer's held connection on both stores (writer_session.py): the same group,
refusal and failure rules on SQLite and PostgreSQL, and a dropped PostgreSQL connection replaced
before a group runs on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from pipeline.errors import DeliveryError
from pipeline.gateway import writer_session
from pipeline.gateway.writer_session import WriterSession
from pipeline.store import make_engine, serialize_writes, session_factory

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url, create=False)
    if engine.dialect.name == "sqlite":
        serialize_writes(engine)
    with session_factory(engine).begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER PRIMARY KEY)"))
    yield engine
    engine.dispose()


def _rows(engine: Engine) -> list[int]:
    with session_factory(engine).begin() as s:
        return [x for (x,) in s.execute(text("SELECT x FROM t ORDER BY x"))]


def test_groups_run_on_one_held_connection_and_a_refusal_leaves_nothing(engine: Engine) -> None:
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
    held = writer._session
    assert held is not None
    with pytest.raises(DeliveryError), writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (2)"))
        raise DeliveryError("refused")
    with writer.begin() as s:
        assert s is held  # a refusal keeps the held connection
        for x in (3, 4, 5):
            try:
                with s.begin_nested():
                    s.execute(text(f"INSERT INTO t VALUES ({x})"))
                    if x == 4:
                        raise DeliveryError("refused")
            except DeliveryError:
                pass
    assert _rows(engine) == [1, 3, 5]  # another connection reads what the groups committed
    writer.close()


def test_a_store_error_rolls_the_group_back_and_the_next_opens_a_fresh_connection(
    engine: Engine,
) -> None:
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
    held = writer._session
    with pytest.raises(DBAPIError), writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (2)"))
        s.execute(text("INSERT INTO t VALUES (1)"))  # a duplicate key
    assert writer._session is None
    with writer.begin() as s:
        assert s is not held
        s.execute(text("INSERT INTO t VALUES (4)"))
    assert _rows(engine) == [1, 4]
    writer.close()


def test_a_held_postgresql_connection_the_server_dropped_is_replaced_before_a_group(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's idle ping, kept for the held connection: without it the group after an idle
    spell in which the server dropped the connection would fail with a retriable error."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no server to drop a connection")
    monkeypatch.setattr(writer_session, "PING_IDLE_S", 0.0)  # every group finds it idle
    writer = WriterSession(session_factory(engine))
    with writer.begin() as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
        pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
    with engine.connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        other.commit()
    with writer.begin() as s:
        assert s.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
        s.execute(text("INSERT INTO t VALUES (2)"))
    assert _rows(engine) == [1, 2]
    writer.close()
