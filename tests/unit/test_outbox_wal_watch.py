"""The relay's idle wait watching SQLite's WAL (pipeline/outbox/wal_watch.py, idle.py;
docs/outbox.md invariant 9): a commit of any connection, another process's too, ends the wait
without a poll; the WAL file deleted and made again is still watched; at most one wait per
``poll_s`` ends for commits; a wake ends it at once; and a real relay whose poll never comes
ships a row another process commits."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from pipeline.outbox import Relay, outbox_status, write
from pipeline.outbox.idle import IdleWait
from pipeline.outbox.wal_watch import Seen, WalWatch, wal_file
from pipeline.store import make_engine, session_factory
from tests.unit.test_outbox_idle import waiting

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")

NEVER = 3600.0  # a poll or an idle limit that never comes within a test
BOUND_S = 60.0  # a hang detector, not a timing claim


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with eng.begin() as c:
        c.execute(text("CREATE TABLE t (x INTEGER)"))
    yield eng
    eng.dispose()


def _commit_elsewhere(path: Path) -> None:
    """One INSERT committed by another process (no pool, no wake of ours)."""
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('INSERT INTO t VALUES (1)'); c.commit(); c.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=BOUND_S)


def _until_written(watch: WalWatch) -> Seen:
    """The first wait that sees something (events about the directory's other files end a wait
    with nothing), within the bound."""
    deadline = time.monotonic() + BOUND_S
    seen = Seen.NOTHING
    while seen is Seen.NOTHING and time.monotonic() < deadline:
        seen = watch.wait(1.0)
    return seen


def test_another_process_commit_is_seen_and_the_wal_made_again_is_still_watched(
    engine: Engine, tmp_path: Path
) -> None:
    watch = WalWatch.for_engine(engine)
    assert watch is not None and watch.path == tmp_path / "store.db-wal"
    watch.arm()
    _commit_elsewhere(tmp_path / "store.db")
    assert _until_written(watch) is Seen.WRITTEN
    engine.dispose()  # every connection closed: SQLite deletes the -wal file
    assert not (tmp_path / "store.db-wal").exists()
    _commit_elsewhere(tmp_path / "store.db")  # ... and the next commit makes it again
    assert _until_written(watch) is Seen.WRITTEN
    assert watch.wait(0.05) is Seen.NOTHING  # all of it taken
    watch.close()


def test_disarmed_writes_are_not_seen_and_an_interrupt_ends_a_wait(engine: Engine) -> None:
    """Disarmed, the store's writers pay for no event (the relay looks at ``data_version``
    once it arms again); armed, the next write is seen; an interrupt ends a wait at once."""
    watch = WalWatch.for_engine(engine)
    assert watch is not None and not watch.armed
    with engine.begin() as c:
        c.execute(text("INSERT INTO t VALUES (1)"))
    watch.arm()
    assert watch.wait(0.2) is Seen.NOTHING  # written before the arming: not an event
    with engine.begin() as c:
        c.execute(text("INSERT INTO t VALUES (2)"))
    assert _until_written(watch) is Seen.WRITTEN
    watch.disarm()
    with engine.begin() as c:
        c.execute(text("INSERT INTO t VALUES (3)"))
    assert watch.wait(0.2) is Seen.NOTHING
    threading.Timer(0.1, watch.interrupt).start()
    assert watch.wait(BOUND_S) is Seen.WOKEN
    watch.close()
    watch.interrupt()  # after close: nothing written anywhere, nothing raised


def test_watched_the_idle_wait_ends_at_a_commit_once_per_spacing_without_polling(
    engine: Engine, tmp_path: Path
) -> None:
    idle = IdleWait(engine, poll_s=NEVER, max_idle_s=NEVER, watch=True)
    assert idle.watched

    assert idle._probe is not None
    idle._probe.changed()  # what is committed so far: seen
    looks = [0]
    look = idle._probe.changed

    def counted() -> bool:
        looks[0] += 1
        return look()

    idle._probe.changed = counted  # type: ignore[method-assign]
    stop = threading.Event()
    ended = waiting(idle, stop)
    assert not ended.wait(0.3)  # nothing committed: still waiting, looked twice at arming
    _commit_elsewhere(tmp_path / "store.db")
    assert ended.wait(BOUND_S), "another process's commit did not end the wait"
    assert looks[0] == 2  # the look before the arming and the one after: no poll
    ended = waiting(idle, stop)
    _commit_elsewhere(tmp_path / "store.db")  # within poll_s (an hour) of the last: spaced
    assert not ended.wait(0.3)
    idle.wake()  # a wake ends it at once, spacing or not
    assert ended.wait(BOUND_S)
    idle.close()


def test_nothing_to_watch_outside_a_sqlite_file_in_wal_mode(tmp_path: Path) -> None:
    memory = make_engine("sqlite://")
    assert wal_file(memory) is None
    rollback = create_engine(f"sqlite:///{tmp_path / 'plain.db'}")  # a rollback journal
    with rollback.begin() as c:
        c.execute(text("CREATE TABLE t (x INTEGER)"))
    assert wal_file(rollback) is None
    never = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", create=False)
    assert wal_file(never) is None  # not connected to: PostgreSQL has NOTIFY instead
    assert not IdleWait(memory, poll_s=NEVER, max_idle_s=NEVER, watch=True).watched


class _Broker:
    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.sent = 0

    def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        self.queue.append(on_delivery)

    def poll(self, _timeout: float = 0) -> int:
        queue, self.queue = self.queue, []
        for callback in queue:
            self.sent += 1
            callback(None, None)
        return len(queue)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


@contextlib.contextmanager
def _relay_that_never_polls(engine: Engine) -> Iterator[_Broker]:
    """A relay on ``engine`` whose idle limit never comes and that never polls: armed, it looks
    at ``data_version`` only when its watch ends a wait (its looks are counted: none while it
    waits and nothing is written), so only the watch can tell it that rows were committed.
    Stopped as the gateway stops it (its stop set, then ``Supervised.wake``).

    Its look is real, not blinded: the first write to the WAL can come before the commit it
    belongs to is visible (a writer restarting a checkpointed WAL writes its header at its
    ``BEGIN``), so the pass that wake starts finds nothing, and the look after ``poll_s``
    finds the commit, as in production. A blinded look left such a relay waiting for ever."""
    broker = _Broker()
    relay = Relay(
        engine=engine,
        bootstrap="unused:1",
        producer_factory=lambda _c: broker,
        idle_wait_s=0.05,
        metrics_interval_s=NEVER,
    )
    assert relay.idle.watched and relay.idle._probe is not None
    looks: list[bool] = []
    look = relay.idle._probe.changed

    def counted() -> bool:
        looks.append(look())
        return looks[-1]

    relay.idle._probe.changed = counted  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + BOUND_S
        while not (relay.idle._watch is not None and relay.idle._watch.armed):
            assert time.monotonic() < deadline, "the relay never armed its watch"
            time.sleep(0.005)
        before = len(looks)
        time.sleep(10 * relay.idle.poll_s)  # a polling relay would look ten times meanwhile
        assert len(looks) - before <= 1  # at most the look right after arming
        yield broker
    finally:
        stop.set()
        relay.wake()
        thread.join(BOUND_S)
        engine.dispose()
    assert not thread.is_alive()


def _drained(engine: Engine) -> int:
    deadline = time.monotonic() + BOUND_S
    while (backlog := outbox_status(engine).backlog) and time.monotonic() < deadline:
        time.sleep(0.01)
    return backlog


def test_a_relay_that_never_polls_ships_a_row_another_process_commits(tmp_path: Path) -> None:
    """The relay's own code, blind but for the watch: a writer outside this process committed
    a row (docs/outbox.md invariant 9)."""
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = make_engine(url)
    code = (
        "import sys; from pipeline.store import make_engine, session_factory; "
        "from pipeline.outbox import write; e = make_engine(sys.argv[1]); "
        "s = session_factory(e)()\n"
        "with s.begin(): write(s, topic='t', key=b'k', value=b'v', branch_key='b')"
    )
    with _relay_that_never_polls(engine) as broker:
        subprocess.run([sys.executable, "-c", code, url], check=True, timeout=120)
        assert _drained(engine) == 0 and broker.sent == 1


def test_a_row_this_process_commits_without_a_wake_is_shipped_too(tmp_path: Path) -> None:
    """A writer in this process that does not wake the relay (no ``wake_on_commit``) is seen by
    the watch as well (the crash window "a committed row is not handed over")."""
    engine = make_engine(f"sqlite:///{tmp_path / 'outbox.db'}")
    with _relay_that_never_polls(engine) as broker:
        with session_factory(engine).begin() as s:
            write(s, topic="t", key=b"k", value=b"v", branch_key="b")
        assert _drained(engine) == 0 and broker.sent == 1


def test_a_watch_that_cannot_be_armed_any_more_leaves_the_relay_polling(engine: Engine) -> None:
    """inotify's limits reached after the start (another process took every watch): the wait
    ends for a pass and polls from then on, it never raises into the relay's loop."""
    idle = IdleWait(engine, poll_s=0.01, max_idle_s=NEVER, watch=True)
    assert idle._watch is not None and idle._probe is not None
    idle._probe.changed()  # what is committed so far: seen

    def refused() -> None:
        raise OSError(28, "No space left on device")  # inotify_add_watch at max_user_watches

    idle._watch.arm = refused  # type: ignore[method-assign]
    stop = threading.Event()
    assert idle.wait(stop) is False  # a pass, not an error
    assert not idle.watched
    ended = waiting(idle, stop)
    with engine.begin() as c:  # polled for now: data_version sees it
        c.execute(text("INSERT INTO t VALUES (1)"))
    assert ended.wait(BOUND_S)
    idle.close()
