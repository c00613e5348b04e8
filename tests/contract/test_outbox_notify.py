"""A relay in its own process is woken by the writer's commit (LISTEN/NOTIFY).

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


def test_one_notify_per_transaction_and_a_rolled_back_savepoint_does_not_eat_it(
    engine: Engine,
) -> None:
    """A group commit writes many rows: one NOTIFY (a round trip each) is enough, since
    PostgreSQL folds repeats; but a NOTIFY issued inside a savepoint that rolls back is gone,
    so the next write notifies again and the commit still wakes the listener."""
    if engine.dialect.name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    from sqlalchemy import event

    sent: list[str] = []
    event.listen(
        engine,
        "before_cursor_execute",
        lambda _c, _cur, statement, *_: sent.append(statement) if "NOTIFY" in statement else None,
    )
    stop = threading.Event()
    woken = threading.Event()
    thread = listen(engine, woken.set, stop)
    try:
        assert woken.wait(30)
        woken.clear()
        sessions = session_factory(engine)
        with sessions.begin() as s:
            for i in range(5):
                outbox.write(s, topic="t", key=b"k", value=b"v", branch_key=f"many-{i}")
        assert len(sent) == 1, sent
        assert woken.wait(30)
        woken.clear()
        sent.clear()
        with sessions.begin() as s:
            with pytest.raises(RuntimeError), s.begin_nested():
                outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="in-savepoint")
                raise RuntimeError("roll the savepoint back")
            outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="after-savepoint")
        assert len(sent) == 2, sent
        assert woken.wait(30)  # the commit delivered the second one
    finally:
        stop.set()
        assert thread is not None
        thread.join(10)


def test_a_process_whose_writers_wake_its_relay_sends_no_notify(store_url: str) -> None:
    """Invariant 9 (docs/outbox.md): a gateway's writers wake its relay in process, so their
    commits do not NOTIFY (a notifying commit holds a server-wide lock through its disk flush);
    a writer of another process, on its own engine, still does."""
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite has no NOTIFY")
    import psycopg

    from pipeline.outbox.notify import CHANNEL, woken_in_process

    gateway, other = make_engine(store_url), make_engine(store_url)
    url = gateway.url.set(drivername="postgresql").render_as_string(hide_password=False)
    heard: list[str] = []
    try:
        with psycopg.connect(url, autocommit=True) as listener:
            listener.add_notify_handler(lambda n: heard.append(n.channel))
            listener.execute(f"LISTEN {CHANNEL}")
            woken_in_process(gateway)
            with session_factory(gateway).begin() as s:
                outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="gw")
            listener.execute("SELECT 1")  # a notification committed before it comes with it
            assert heard == []
            with session_factory(other).begin() as s:
                outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="cli")
            listener.execute("SELECT 1")
            assert heard == [CHANNEL]
    finally:
        gateway.dispose()
        other.dispose()
