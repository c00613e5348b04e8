"""One local-socket connection's answers: sent in request order by whoever decides one.

A connection's requests are answered in the order they came (a client may pipeline). The
answer used to go out from a thread of the connection, woken for each decided request: at 500
sends/s that wake-up (a futex and a GIL hand-over per send, on a busy two-core machine) cost
about as much CPU as the send's own statements. Now the thread that decides a request (the
writer after its group commit, a poll's thread, the reader for a malformed request) calls
:meth:`Answers.flush`: every decided answer at the head of the order is written with one
non-blocking ``send``. What the socket does not take at once (a client that does not read) is
left to a thread of the connection, which sends it blocking, so a slow client never holds up
the committer -- and later answers queue behind it, keeping the order. That thread is started
only when such a backlog first builds: a connection per call (``fleet send``, the MCP server)
used to cost a thread start and exit for it besides the reader's, about as much CPU as the
send. Without it, whoever answers the last request after the reader ended closes the
connection (``on_close``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Decided(Protocol):
    """A request as the connection holds it: decided once ``result`` is set."""

    @property
    def result(self) -> Any: ...

    def frame(self) -> bytes: ...


class Answers:
    """The answers of one connection, in request order (see the module docstring)."""

    def __init__(self, conn: socket.socket, on_close: Callable[[], None] = lambda: None) -> None:
        self.conn = conn
        self._on_close = on_close
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._order: deque[Decided] = deque()
        self._backlog = bytearray()  # taken by run(): the socket would not take it at once
        self._sending = False  # run() is sending outside the lock: later answers queue
        self._reading = True  # the reader may still add requests
        self._broken = False  # a send failed: the client went away
        self._sender: threading.Thread | None = None  # sends the backlog; then it closes
        self._closed = False
        self._answered_at = 0.0  # monotonic: when the last answers were sent

    def idle_since(self) -> float | None:
        """When this connection's last answers went out, if none of its requests is unanswered
        now (its caller may be waiting to send the next); None while some are."""
        return None if self._order or self._backlog or self._sending else self._answered_at

    def add(self, pending: Decided) -> None:
        """The reader: the next request, in order (it may be decided already)."""
        with self._lock:
            self._order.append(pending)
        if pending.result is not None:
            self.flush()

    def end(self) -> None:
        """The reader: no more requests; the connection closes once all are answered."""
        with self._lock:
            self._reading = False
            close = self._settle()
        if close:
            self._on_close()

    def flush(self) -> None:
        """Send every decided answer at the head of the order (never blocks on the socket)."""
        with self._lock:
            frames = []
            while self._order and self._order[0].result is not None:
                try:
                    frames.append(self._order.popleft().frame())
                except Exception:  # an answer too large to frame: hang up, as before
                    log.exception("local socket: an answer could not be framed")
                    self._broken = True
            if frames and not self._broken:
                self._answered_at = time.monotonic()
                data = b"".join(frames)
                if self._backlog or self._sending:
                    self._backlog += data  # behind what run() has: keep the order
                else:
                    try:
                        sent = self.conn.send(data, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        sent = 0
                    except OSError:
                        self._broken = True
                        sent = len(data)
                    if sent < len(data):
                        self._backlog += data[sent:]
            close = self._settle()
        if close:
            self._on_close()

    def _settle(self) -> bool:
        """Under the lock: hand a backlog to the sending thread (started the first time); True
        when the connection is done -- the reader ended and every request is answered, or the
        client went away -- and the caller is the one to close it."""
        if self._sender is not None:
            self._wake.notify()  # it sends, and closes at the end
            return False
        if self._backlog and not self._broken:
            self._sender = threading.Thread(target=self._run, name="gw-socket-answers", daemon=True)
            self._sender.start()
            return False
        if self._closed or not (self._broken or (not self._reading and not self._order)):
            return False
        self._closed = True
        return True

    def _run(self) -> None:
        """The sending thread: sends the backlog blocking; closes the connection when the
        reader has ended and every request is answered (or the client went away)."""
        try:
            with self._lock:
                while True:
                    while not (
                        self._backlog or self._broken or (not self._reading and not self._order)
                    ):
                        self._wake.wait()
                    if self._broken or not self._backlog:
                        return
                    data = bytes(self._backlog)
                    self._backlog.clear()
                    self._sending = True
                    self._lock.release()
                    try:
                        self.conn.sendall(data)
                    except OSError:
                        gone = True  # the client went away; what was committed stays
                    else:
                        gone = False
                    finally:
                        self._lock.acquire()
                        self._sending = False
                    self._broken = self._broken or gone
        finally:
            self._on_close()
