"""SQLite: the WAL copied back into the database on a thread of its own, not in a writer's COMMIT.

By default SQLite checkpoints inside a ``COMMIT``: the writer whose transaction takes the WAL past
1,000 pages copies every page back into the database file and syncs it before its ``COMMIT``
returns. That writer is the hot path (a batch transaction, a socket group's commit), so about
one commit in every 1,000 pages written waits for a few megabytes of copying and an ``fsync``;
on the consume runtime's bench it was 11 % of the batch processing, about a quarter of its SQL.

:class:`WalCheckpointer` (one thread per process, started by the first SQLite file store this
process opens, :func:`pipeline.store.make_engine`) does it instead:

* **Only a written WAL is checkpointed.** Each registered store's ``-wal`` file is looked at with
  one ``stat``; a look that finds it unchanged since the last checkpoint does nothing else. A
  store idle for ``IDLE_LOOKS`` looks has its connection closed; an idle process wakes this
  thread once every ``IDLE_S``.
* **A ``PASSIVE`` checkpoint**, on a connection of its own: it copies what no reader still needs
  and never waits for, nor blocks, a writer or a reader. The writer's next transaction starts
  the WAL again from its beginning once every frame was copied (SQLite's own rule).
* **Paced by the WAL's growth.** A store's next look comes sooner when its last checkpoint found
  more than ``TARGET_FRAMES`` frames, later when it found far fewer (``MIN_S`` .. ``MAX_S``).
* **The writers keep a fallback.** A store registered here has its connections'
  ``wal_autocheckpoint`` raised to ``FALLBACK_FRAMES``: if this thread falls behind (or dies), a
  writer checkpoints as before, only later. Durability is unchanged: a checkpoint copies committed
  frames; a crash mid-way leaves them in the WAL, replayed at the next open.
* **A failure never stops it.** A checkpoint that fails (a full disk, a file gone) is logged once
  per store until one succeeds again, and the store is looked at again after ``MAX_S``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

TARGET_FRAMES = 1000  # SQLite's own autocheckpoint threshold: ~4 MB of 4 KiB pages
FALLBACK_FRAMES = 10_000  # the writers' own checkpoint, should this thread fall behind
MIN_S = 0.01
MAX_S = 5.0
IDLE_S = 5.0  # how often an idle process's thread wakes to look
IDLE_LOOKS = 3  # unchanged looks in a row before a store's connection is closed


@dataclass
class _Store:
    """One database file this process writes, and what the thread knows of it."""

    path: str
    users: int = 0  # engines of this process on the file
    conn: sqlite3.Connection | None = None
    seen: tuple[int, int] | None = None  # the WAL's (mtime_ns, size) at the last checkpoint
    frames: int = 0  # frames in the WAL at the last checkpoint (fewer next time: it restarted)
    every_s: float = 0.1
    due: float = 0.0
    idle_looks: int = 0
    idle: bool = True  # its last look found the WAL unchanged: a commit nudges the thread
    failing: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)  # a look, or a release
    stats: dict[str, int] = field(
        default_factory=lambda: {"checkpoints": 0, "frames": 0, "failures": 0}
    )


class WalCheckpointer:
    """The process's checkpoint thread (see the module doc). :meth:`register` a database file
    for every engine on it; the file is dropped when its last engine is gone."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, thread: bool = True) -> None:
        self._clock = clock
        self._threaded = thread  # False: the owner calls :meth:`step` (tests)
        self._lock = threading.Lock()
        self._stores: dict[str, _Store] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._retired: list[_Store] = []  # unregistered: their connections close on the thread
        self._totals = {"checkpoints": 0, "frames": 0, "failures": 0}  # this process's, ever

    def forget_after_fork(self) -> None:
        """A forked child: the parent's connections and thread are not its own (SQLite forbids
        using a connection across a fork); what it registers from now on starts afresh."""
        self._lock = threading.Lock()
        self._stores, self._retired, self._thread = {}, [], None
        self._totals = dict.fromkeys(self._totals, 0)
        self._wake = threading.Event()

    def register(self, path: str, owner: object) -> str:
        """Checkpoint ``path`` while ``owner`` (an engine) lives; returns the name to
        :meth:`nudge` it by."""
        real = os.path.realpath(path)
        with self._lock:
            store = self._stores.get(real)
            if store is None:  # what is in its WAL now is not this process's to copy
                store = self._stores[real] = _Store(real, seen=_wal_state(real), due=self._clock())
            store.users += 1
            if self._threaded and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._run, name="fleet-wal-checkpoint", daemon=True
                )
                self._thread.start()
        weakref.finalize(owner, self._unregister, real)
        self._wake.set()
        return real

    def nudge(self, path: str) -> None:
        """A commit on ``path`` (the engine's commit event): an idle store is looked at now,
        so a burst of writes after a quiet spell is not left to the writers' fallback."""
        store = self._stores.get(path)
        if store is not None and store.idle:
            store.idle = False
            store.due = 0.0
            self._wake.set()

    def release(self, path: str) -> None:
        """An engine on ``path`` was disposed: close this thread's connection too, so that the
        last connection closed removes the WAL as it would without this thread. It opens one
        again only once some connection writes the store."""
        store = self._stores.get(path)
        if store is not None:
            with store.lock:
                _close(store)
                store.seen = _wal_state(store.path)

    def _unregister(self, real: str) -> None:
        with self._lock:
            store = self._stores.get(real)
            if store is None:
                return
            store.users -= 1
            if store.users > 0:
                return
            del self._stores[real]
            self._retired.append(store)  # closed by the thread, never while it checkpoints
        self._wake.set()

    def store_stats(self, path: str) -> dict[str, int] | None:
        """The counts of ``path``'s checkpoints while this thread looks after it (as
        :meth:`stats`), or ``None`` when it does not (no engine of this process opened the file
        with ``background_checkpoint``)."""
        with self._lock:
            store = self._stores.get(os.path.realpath(path))
        return None if store is None else dict(store.stats)

    def stats(self) -> dict[str, int]:
        """Checkpoints run, new frames they found in the WAL, failures: this process's totals
        (they never go down; ``fleet_store_wal_checkpoints_total`` and its siblings)."""
        with self._lock:
            return dict(self._totals)

    def _count(self, store: _Store, what: str, n: int = 1) -> None:
        store.stats[what] += n
        with self._lock:
            self._totals[what] += n

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self.step())
            self._wake.clear()

    def step(self) -> float | None:
        """Look at every store that is due; the seconds until the next is (None: no store)."""
        with self._lock:
            stores = list(self._stores.values())
            retired, self._retired = self._retired, []
        for store in retired:
            with store.lock:
                _close(store)
        now = self._clock()
        for store in stores:
            if store.due <= now:
                with store.lock:
                    self.look(store, now)
        if not stores:
            return None
        return max(0.0, min(s.due for s in stores) - self._clock())

    def look(self, store: _Store, now: float) -> None:
        """One look at ``store``: a checkpoint if its WAL was written since the last one."""
        written = _wal_state(store.path)
        if written is None or written == store.seen:
            store.idle = True
            store.idle_looks += 1
            if store.idle_looks >= IDLE_LOOKS:
                _close(store)
            store.due = now + IDLE_S
            return
        store.idle_looks = 0
        try:
            if store.conn is None:
                store.conn = _connect(store.path)
            row = store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            self._count(store, "failures")
            if not store.failing:
                log.warning(
                    "WAL checkpoint of %s failed (%s); the writers' own checkpoint stands",
                    store.path,
                    exc,
                )
            store.failing = True
            _close(store)
            store.due = now + MAX_S
            return
        frames = max(0, int(row[1]))  # (busy, frames in the WAL, copied); -1: not in WAL mode
        new = frames - store.frames if frames >= store.frames else frames
        store.frames = frames
        store.failing = False
        store.seen = written
        self._count(store, "checkpoints")
        self._count(store, "frames", new)
        if new > TARGET_FRAMES:
            store.every_s = max(MIN_S, store.every_s / 2)
        elif new < TARGET_FRAMES // 2:
            store.every_s = min(MAX_S, store.every_s * 1.5)
        store.due = now + store.every_s


def _wal_state(path: str) -> tuple[int, int] | None:
    """The ``-wal`` file's (mtime_ns, size); None without one (no connection open on the store
    anywhere: nothing to copy)."""
    try:
        st = os.stat(path + "-wal")
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _close(store: _Store) -> None:
    conn, store.conn = store.conn, None
    if conn is not None:
        with contextlib.suppress(sqlite3.Error):
            conn.close()


CHECKPOINTER = WalCheckpointer()
os.register_at_fork(after_in_child=CHECKPOINTER.forget_after_fork)
