"""SQLite: learn that any connection committed without polling the store (inotify on the WAL).

Every commit to a SQLite store in WAL mode appends to its ``-wal`` file, whichever process or
connection makes it, and the kernel reports that write (``inotify``, Linux). The relay's idle
wait (:mod:`.idle`) blocks on this watch and on a pipe its in-process wakes write to, so an idle
relay wakes when the store changed, and not every ``idle_wait_s`` to ask it.

The watch is set only while the relay waits (:meth:`WalWatch.arm`); set, the kernel makes an
event for every write into the directory, which the store's writers pay for. The directory is
watched, not the file: SQLite deletes the ``-wal`` file when the last
connection closes and creates it again at the next open, and a watch on the file would go with
it. Events about other files in the directory are read and dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import enum
import logging
import os
import select
import struct
import sys
import threading
from pathlib import Path

from sqlalchemy import Engine

from pipeline.store.engine import sqlite_file

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
_MASK = IN_MODIFY | IN_MOVED_TO | IN_CREATE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class Seen(enum.Enum):
    """What ended a :meth:`WalWatch.wait`."""

    WOKEN = "woken"  # :meth:`WalWatch.interrupt` (an in-process wake)
    WRITTEN = "written"  # the WAL file was written: some connection committed
    NOTHING = "nothing"  # the timeout, or events about other files only


def wal_file(engine: Engine) -> Path | None:
    """The ``-wal`` file of ``engine``'s store, or None: not SQLite, in memory, or not in WAL
    mode (nothing to watch)."""
    if engine.dialect.name != "sqlite":
        return None
    database = sqlite_file(engine.url.database)
    if database is None:
        return None
    try:
        with engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    except Exception:  # noqa: BLE001 - a store that cannot be asked is polled, as before
        return None
    if str(mode).lower() != "wal":
        return None
    return Path(database).resolve().with_name(Path(database).name + "-wal")


class WalWatch:
    """An inotify instance for the WAL's directory, armed only while a wait runs, and a pipe to
    interrupt that wait. Disarmed, the store's writers pay nothing for it: the kernel makes an
    event for every write to a watched directory, and under load (thousands of WAL writes a
    second) that cost every writer thread more than the wakes it saves."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._libc = libc
        self.path = path
        self._dir = os.fsencode(str(path.parent))
        self._name = os.fsencode(path.name)
        self._fd: int = fd
        self._wd = -1  # the watch, while armed
        try:
            self.arm()  # fails here, not in a wait, where it cannot be set
            self.disarm()
        except OSError:
            os.close(fd)
            raise
        self._read_end, self._write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller = select.poll()
        self._poller.register(self._read_end, select.POLLIN)
        self._poller.register(self._fd, select.POLLIN)
        # interrupt() comes from any thread: never a write to a descriptor closed (and reused)
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_engine(cls, engine: Engine) -> WalWatch | None:
        """A watch of ``engine``'s store, or None where there is nothing to watch (not a SQLite
        file in WAL mode, not Linux) or no watch can be set (a warning: the relay polls)."""
        path = wal_file(engine)
        if path is None or not sys.platform.startswith("linux"):
            return None
        try:
            return cls(path)
        except OSError as exc:  # no inotify instance left, say
            log.warning("outbox relay: cannot watch %s (%s); it polls instead", path, exc)
            return None

    @property
    def armed(self) -> bool:
        return self._wd >= 0

    def arm(self) -> None:
        """Watch from now on: every write to the WAL after this call is seen by :meth:`wait`
        (what was written before is not: look at the store once after arming)."""
        self._written()  # events of an earlier arming (its IN_IGNORED): not about now
        wd = self._libc.inotify_add_watch(self._fd, self._dir, _MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch failed on {self._dir!r}")
        self._wd = wd

    def disarm(self) -> None:
        if self._wd >= 0:
            self._libc.inotify_rm_watch(self._fd, self._wd)
            self._wd = -1

    def interrupt(self) -> None:
        """End the current (or the next) :meth:`wait` (safe from any thread)."""
        with self._lock, contextlib.suppress(OSError):  # full: a byte is already waiting
            if not self._closed:
                os.write(self._write_end, b"\0")

    def wait(self, timeout_s: float) -> Seen:
        """Until interrupted, the WAL written (armed), or ``timeout_s``."""
        ready = {fd for fd, _ in self._poller.poll(max(0, int(timeout_s * 1000) + 1))}
        if self._read_end in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read_end, 512):
                    pass
            return Seen.WOKEN
        if self._fd in ready and self._written():
            return Seen.WRITTEN
        return Seen.NOTHING

    def _written(self) -> bool:
        """Take every queued event; True when one was about the WAL (or some were lost)."""
        hit = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return hit
            at = 0
            while at + _EVENT.size <= len(data):
                _wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
                at += _EVENT.size + size
                if mask & IN_Q_OVERFLOW or name == self._name:
                    hit = True

    def close(self) -> None:
        """Not while a :meth:`wait` runs (its owner's thread closes it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._fd, self._read_end, self._write_end):
                with contextlib.suppress(OSError):
                    os.close(fd)
