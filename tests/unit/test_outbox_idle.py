"""The relay's idle wait (pipeline/outbox/idle.py): another connection's commit is seen by the
SQLite probe, a wake from this process ends the wait, and nothing else makes a pass early."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import create_engine, text

from pipeline.outbox.idle import IdleWait, _DataVersion


def _engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with engine.begin() as c:
        c.execute(text("CREATE TABLE t (x INTEGER)"))
    return engine


def test_the_probe_sees_a_commit_of_another_connection_and_nothing_else(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    probe = _DataVersion(engine)
    assert probe.changed()  # the first look: unknown, so a pass finds out
    assert not probe.changed()
    with engine.begin() as c:  # another connection of the same pool
        c.execute(text("INSERT INTO t VALUES (1)"))
    assert probe.changed()
    assert not probe.changed()
    with engine.connect() as c:  # a read commits nothing
        c.execute(text("SELECT * FROM t")).fetchall()
    assert not probe.changed()
    probe.close()
    assert probe.changed()  # a new connection starts over: a pass, not a missed commit


def waiting(idle: IdleWait, stop: threading.Event) -> threading.Event:
    """``idle.wait(stop)`` on a thread of its own; the event is set once that wait ended."""
    ended = threading.Event()

    def waiter() -> None:
        idle.wait(stop)
        ended.set()

    threading.Thread(target=waiter, daemon=True).start()
    return ended


def test_a_commit_elsewhere_ends_the_wait_long_before_its_limit(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    idle = IdleWait(engine, poll_s=0.01, max_idle_s=3600.0)
    stop = threading.Event()
    idle.wait(stop)  # the first look always ends it (the probe knew no version yet)
    done = waiting(idle, stop)
    assert not done.wait(0.2)  # nothing committed: still waiting
    with engine.begin() as c:
        c.execute(text("INSERT INTO t VALUES (2)"))
    assert done.wait(60), "a commit by another connection did not end the idle wait"
    idle.close()


def test_a_wake_from_this_process_ends_the_wait(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    idle = IdleWait(engine, poll_s=3600.0, max_idle_s=3600.0)
    stop = threading.Event()
    done = threading.Event()
    t = threading.Thread(target=lambda: (idle.wait(stop), done.set()), daemon=True)
    t.start()
    assert not done.wait(0.2)
    idle.wake()
    assert done.wait(60)
    idle.clear()
    assert not idle._event.is_set()
    idle.close()


def test_without_sqlite_there_is_no_probe_and_the_wait_is_one_poll() -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connected
    idle = IdleWait(engine, poll_s=0.01, max_idle_s=3600.0)
    assert idle._probe is None
    idle.wait(threading.Event())  # returns after one poll, without touching the store
