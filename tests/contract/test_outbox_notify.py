"""A relay in its own process is woken by the writer's commit (issue 17: LISTEN/NOTIFY).

PostgreSQL delivers ``NOTIFY fleet_outbox`` at the writer's commit and never for a rollback;
SQLite has no channel (``listen`` returns None: the gateway wakes its own relay instead).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from pipeline import outbox
from pipeline.outbox.notify import listen
from pipeline.store import make_engine, session_factory


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


def test_the_listener_wakes_on_commit_and_not_on_rollback(engine: Engine) -> None:
    stop = threading.Event()
    woken = threading.Event()
    thread = listen(engine, woken.set, stop)
    if engine.dialect.name != "postgresql":
        assert thread is None
        return
    try:
        assert woken.wait(30)  # the first wake: once listening (rows may predate it)
        woken.clear()
        sessions = session_factory(engine)
        with pytest.raises(RuntimeError), sessions.begin() as s:
            outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="b-rolled-back")
            raise RuntimeError("roll back")
        s2 = sessions()
        with s2.begin():
            outbox.write(s2, topic="t", key=b"k", value=b"v", branch_key="b")
            # written, not committed: nothing is delivered yet
            assert not woken.wait(1.0)
        assert woken.wait(30)  # the commit delivered it
        s2.close()
    finally:
        stop.set()
        assert thread is not None
        thread.join(10)
