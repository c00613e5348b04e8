"""The relay's idle wait: how an idle relay learns that rows were committed, cheaply.

A writer in the relay's own process wakes it at once (:meth:`IdleWait.wake`, called after its
commit). A writer in another process cannot: on PostgreSQL its commit's ``NOTIFY`` wakes the relay
(:mod:`.notify`); on SQLite the relay looks every ``poll_s`` whether any other connection committed
since it last looked -- ``PRAGMA data_version`` on one held connection, a few microseconds, where a
pass (a pooled connection, the branch listing) costs a hundred times that. So an idle relay makes
one pass per ``max_idle_s`` (its gauges stay fresh) and another only when something changed.

Invariant: a row committed while the relay waits is fetched within ``poll_s`` of its commit (at
once when its writer is in this process), exactly as if every poll were a pass.

Watched (``watch``; :mod:`.wal_watch`: inotify on SQLite's WAL, Linux) the wait does not poll:
it blocks until a wake, a commit of any connection or ``max_idle_s``; it looks at ``stop`` only
then, so whoever stops the relay wakes it. A commit ends it within ``poll_s`` as before (at once
on an idle store), but at most one wait per ``poll_s`` ends for commits; the watch is armed only
after that spacing, so under load the store's writers rarely pay for it. A watch that cannot be
armed any more (inotify's limits) leaves the relay polling, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any

from sqlalchemy import Engine

from .wal_watch import Seen, WalWatch

log = logging.getLogger(__name__)


class _DataVersion:
    """SQLite's ``data_version`` on a connection of its own: changes when another one commits."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Any = None
        self._last: int | None = None

    def changed(self) -> bool:
        """True when another connection committed since the last call (and on the first call, or
        when the store cannot be asked: a pass then finds out)."""
        try:
            if self._conn is None:
                self._conn = self._engine.raw_connection()
            cur = self._conn.cursor()
            cur.execute("PRAGMA data_version")
            version = int(cur.fetchone()[0])
            cur.close()
        except Exception:  # noqa: BLE001 - the pass that follows reports a broken store
            self.close()
            return True
        changed, self._last = version != self._last, version
        return changed

    def close(self) -> None:
        conn, self._conn, self._last = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is dropped all the same
                conn.close()  # back to the pool


class IdleWait:
    def __init__(
        self, engine: Engine, *, poll_s: float, max_idle_s: float, watch: bool = False
    ) -> None:
        self.poll_s = poll_s
        self.max_idle_s = max(max_idle_s, poll_s)
        self._event = threading.Event()
        self._probe = _DataVersion(engine) if engine.dialect.name == "sqlite" else None
        # ``watch``: on a SQLite file in WAL mode (Linux), commits are seen, not polled for
        self._engine = engine if watch and self._probe is not None else None
        self._watch = WalWatch.for_engine(engine) if self._engine is not None else None
        self._seen = -math.inf  # monotonic: when a commit the watch saw last ended a wait

    @property
    def watched(self) -> bool:
        """Whether commits are watched (:mod:`.wal_watch`) rather than polled for."""
        return self._watch is not None

    def wake(self) -> None:
        """Rows were committed just now by a writer in this process: end the wait at once."""
        # once set, a pass is due (its clear() comes first, then its read): a commit that sees
        # it set is read by that pass, so setting it again would only cost a Condition notify
        if not self._event.is_set():
            self._event.set()
            watch = self._watch
            if watch is not None and watch.armed:  # else its wait sees the event first
                watch.interrupt()

    def clear(self) -> None:
        """A pass starts: a wake() from here on ends the next wait at once."""
        self._event.clear()

    def wait(self, stop: threading.Event, *, until: float | None = None) -> bool:
        """Until woken, another connection committed (SQLite), ``max_idle_s`` passed or ``stop``;
        elsewhere (PostgreSQL, woken by ``NOTIFY``) one ``poll_s``. Never past ``until``
        (monotonic; the relay's kept acks fall due then). True when a :meth:`wake` ended it."""
        now = time.monotonic()
        if self._probe is None:
            wait_s = self.poll_s if until is None else min(self.poll_s, until - now)
            return self._event.wait(max(0.0, wait_s))
        deadline = now + self.max_idle_s if until is None else min(now + self.max_idle_s, until)
        if self._watch is None and self._engine is not None:  # closed by a failed run
            self._watch = WalWatch.for_engine(self._engine)
            self._engine = None if self._watch is None else self._engine
        if self._watch is not None:
            return self._watched(self._watch, stop, deadline)
        while not self._event.wait(min(self.poll_s, max(0.0, deadline - time.monotonic()))):
            if stop.is_set() or time.monotonic() >= deadline or self._probe.changed():
                return False
        return True

    def _watched(self, watch: WalWatch, stop: threading.Event, deadline: float) -> bool:
        """The wait on the watch. Within ``poll_s`` of the last commit that ended a wait it
        waits for a wake only (under load every inbox batch writes the WAL, and a pass per batch
        is what the wakes avoid); after that it looks at ``data_version`` (commits made while
        it was not armed end it there, unarmed), arms the watch, looks once more (a commit
        between the look and the arming), and waits for a wake, a commit or ``deadline``.
        ``stop`` is looked at only then: whoever sets it wakes the relay (``Supervised.wake``)."""
        assert self._probe is not None
        while True:
            now = time.monotonic()
            if stop.is_set() or now >= deadline:
                return False
            spaced = self._seen + self.poll_s
            if now < spaced:
                if self._event.wait(min(spaced, deadline) - now):
                    return True
                continue
            # a look first: under load something committed since, and the pass comes without
            # arming (each arm and disarm of a watch costs the kernel as much as a look)
            if self._probe.changed():
                self._seen = now
                return False
            try:
                watch.arm()
            except OSError as exc:  # no watch left for it now: poll from here on, never crash
                log.warning("outbox relay: cannot watch %s (%s); it polls instead", watch.path, exc)
                self._engine = None
                self.close_watch()
                return False
            try:
                if self._probe.changed():  # committed between that look and the arming
                    self._seen = now
                    return False
                while not self._event.is_set():
                    now = time.monotonic()
                    if stop.is_set() or now >= deadline:
                        return False
                    if watch.wait(deadline - now) is Seen.WRITTEN:
                        self._seen = time.monotonic()
                        return False
                return True
            finally:
                watch.disarm()

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        self.close_watch()

    def close_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
