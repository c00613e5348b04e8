"""The in-process write gate (``pipeline.store.serialize_writes``, docs/store.md): a process's
SQLite write transactions queue on a lock instead of SQLite's busy handler, and every way a
write transaction ends (commit, rollback, a connection returned mid-transaction, a BEGIN that
failed) lets the next one in.

The engines here run with ``busy_timeout=0``: a writer that reached ``BEGIN IMMEDIATE`` while
another thread held the write lock fails at once with "database is locked", so a passing test
means the second writer waited on the gate, not in SQLite."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from pipeline.store import make_engine, readonly, serialize_writes
from pipeline.store.engine import _GATES


def _no_busy_wait(engine: Engine) -> Engine:
    @event.listens_for(engine, "connect")
    def _zero(dbapi_conn: Any, _record: Any) -> None:  # after make_engine's pragmas
        dbapi_conn.execute("PRAGMA busy_timeout=0")

    engine.dispose()  # connections made by the schema check keep their 30 s timeout
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = _no_busy_wait(make_engine(f"sqlite:///{tmp_path / 's.sqlite'}"))
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (v INTEGER)")
    yield eng
    eng.dispose()


def _gate_free(engine: Engine) -> bool:
    return not _GATES[engine.pool]._lock.locked()


def _write_in_thread(engine: Engine, value: int, errors: list[BaseException]) -> threading.Thread:
    def write() -> None:
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("INSERT INTO t VALUES (:v)"), {"v": value})
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_without_the_gate_a_second_writer_meets_sqlites_lock(engine: Engine) -> None:
    """The control: this setup really fails when a writer is not queued in-process."""
    errors: list[BaseException] = []
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        _write_in_thread(engine, 2, errors).join()
    assert len(errors) == 1 and isinstance(errors[0], OperationalError)


def test_a_second_writer_waits_for_the_first_ones_commit(engine: Engine) -> None:
    serialize_writes(engine)
    errors: list[BaseException] = []
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        waiter = _write_in_thread(engine, 2, errors)
        waiter.join(timeout=0.3)  # still queued behind this transaction
        assert waiter.is_alive()
    waiter.join()
    assert errors == []
    with readonly(engine).connect() as conn:  # a reader never queues
        assert sorted(conn.execute(sa.text("SELECT v FROM t")).scalars()) == [1, 2]
    assert _gate_free(engine)


def test_a_rollback_and_a_connection_closed_mid_transaction_release_the_gate(
    engine: Engine,
) -> None:
    serialize_writes(engine)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        raise RuntimeError("rolled back")
    assert _gate_free(engine)
    conn = engine.connect()
    conn.execute(sa.text("INSERT INTO t VALUES (2)"))  # autobegins a write transaction
    assert not _gate_free(engine)
    conn.close()  # back to the pool, never committed
    assert _gate_free(engine)
    errors: list[BaseException] = []
    _write_in_thread(engine, 3, errors).join()
    assert errors == []


def test_a_begin_refused_by_another_process_releases_the_gate(
    engine: Engine, tmp_path: Path
) -> None:
    serialize_writes(engine)
    other = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds SQLite's write lock
    try:
        with pytest.raises(OperationalError), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        assert _gate_free(engine)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (2)"))
    assert _gate_free(engine)


def test_a_thread_writing_through_a_second_connection_meets_sqlite_not_the_gate(
    engine: Engine,
) -> None:
    """A nested write in the thread that holds the gate is not queued behind itself (it would
    wait out the gate's bound): it meets SQLite's lock at once, exactly as without the gate."""
    serialize_writes(engine)
    with engine.begin() as outer:
        outer.execute(sa.text("INSERT INTO t VALUES (1)"))
        with pytest.raises(OperationalError), engine.begin() as inner:
            inner.execute(sa.text("INSERT INTO t VALUES (2)"))
        assert not _gate_free(engine)  # still the outer transaction's
    assert _gate_free(engine)


_HOLDER = """
import sys
import sqlalchemy as sa
from pipeline.store import make_engine, serialize_writes
engine = serialize_writes(make_engine(sys.argv[1]), across_processes=True)
with engine.begin() as conn:
    conn.execute(sa.text("INSERT INTO t VALUES (10)"))
    print("held", flush=True)
    sys.stdin.readline()
print("committed", flush=True)
"""


def test_a_writer_of_another_gated_process_is_waited_for_not_refused(
    engine: Engine, tmp_path: Path
) -> None:
    """Pool members are processes on one file: a gated writer waits for another gated
    process's write transaction on the file lock beside the database (woken when it commits),
    where SQLite -- here with ``busy_timeout=0`` -- would refuse it at once (the control above,
    and the refused-BEGIN test with an ungated holder)."""
    serialize_writes(engine, across_processes=True)
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        try:
            assert child.stdout.readline().strip() == "held"
            errors: list[BaseException] = []
            waiter = _write_in_thread(engine, 2, errors)
            waiter.join(timeout=0.3)  # refused at once without the file lock
            assert waiter.is_alive() and errors == []
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "committed"
            waiter.join()
            assert errors == []
        finally:
            child.kill()
    with readonly(engine).connect() as conn:
        assert sorted(conn.execute(sa.text("SELECT v FROM t")).scalars()) == [2, 10]


def test_the_file_lock_is_opt_in(engine: Engine, tmp_path: Path) -> None:
    """Only processes that ask for it (pool members) queue across processes: a gateway's gate
    stays in-process, as before."""
    serialize_writes(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
    assert not (tmp_path / "s.sqlite-writers").exists()
