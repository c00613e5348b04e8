"""The local socket's reader: one thread accepts and reads every connection (poll).

A thread per connection used to read each one, and a connection per call (``fleet send``, the
MCP server) was accepted by one thread and handed to another: the gateway switched threads
about six times per call (``python -m bench socket``, voluntary context switches), about once
now. Here one thread waits
on the listener and on every connection at once. What one wait finds ready -- new connections,
the requests of any connection -- is read, and the requests of that round go to the server
together (:meth:`SocketServer._reads`: its group commit) before the thread waits again. A
request is read whole before it is handled; a frame that arrives in pieces is kept until the
rest comes.

**Spacing under load.** At a few hundred sends a second every wait found one request, and each
became a group of its own: a wake of this thread, a transaction (``BEGIN IMMEDIATE``, the
``COMMIT``'s lock calls and page writes), the metrics, the relay's wake and an answer write, per
send. So, like the relay's pass spacing (docs/outbox.md, invariant 10), the thread hands a round
over no sooner than ``spacing_s`` after the last one: what it reads meanwhile, on every
connection, is kept (read, in order) and committed as one group when the spacing is out. A
thread that handed nothing over for ``spacing_s`` (idle, or a first send after a pause) commits
at once, so an idle send's latency does not change; under load a send waits at most
``spacing_s`` more.

**A caller waiting on us is not held.** A caller that sends one request at a time, each after
the answer to the last (``SocketClient.send`` in a loop), would be held to one send per
spacing. So a request from a connection that had nothing unanswered, and whose last answer went
out less than ``back_to_back_s`` (0.5 ms) before, hands the round over at once: that caller
was waiting for us, not pacing itself. A caller that pipelines, or paces itself slower than
that, is spaced. Nothing else changes: the requests are answered in order.

**Who closes.** Only this thread closes a connection it still watches. Whoever finds a watched
connection done (its answers' thread, a committer whose answer could not be sent) calls
:meth:`SocketReader.closed`, which shuts it down instead: this thread then sees its end, stops
watching it and closes it. So a descriptor is never closed while it is polled (a new connection
could get its number).
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.host.socket_protocol import FrameError, FrameReader

from .socket_answers import Answers

log = logging.getLogger(__name__)

Request = Callable[[dict[str, Any], Answers, list[Any]], None]
"""The server: one decoded request of a connection; what is to be committed goes in the list."""


class _Conn:
    __slots__ = ("answers", "fd", "frames", "sock")

    def __init__(self, sock: socket.socket, answers: Answers) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.answers = answers
        self.frames = FrameReader(sock)


class SocketReader:
    """Accept on ``listener`` and read every connection on one thread; under load, hand a round
    over at most every ``spacing_s`` (module docstring)."""

    CHUNK = FrameReader.CHUNK

    def __init__(
        self,
        listener: socket.socket,
        *,
        accepted: Callable[[socket.socket], Answers],
        request: Request,
        malformed: Callable[[FrameError, Answers], None],
        reads: Callable[[list[Any]], None],
        spacing_s: float = 0.0,
        back_to_back_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listener = listener
        self._spacing_s = max(0.0, spacing_s)
        self._back_to_back_s = back_to_back_s
        self._clock = clock
        self._accepted = accepted
        self._request = request
        self._malformed = malformed
        self._reads = reads
        # poll(2), not the selectors module: its Python layers cost more per wait than the
        # wait itself; one dict from descriptor to connection is all this thread needs
        self._poll = select.poll()
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._watched: dict[int, _Conn] = {}  # by descriptor; changed under _lock
        self._hangup: set[int] = set()  # done while watched: closed when unwatched
        self._stop = False
        self._kept: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="gw-socket-reader", daemon=True)

    def start(self) -> None:
        self._listener.setblocking(False)
        self._poll.register(self._listener.fileno(), select.POLLIN)
        self._poll.register(self._wake_r.fileno(), select.POLLIN)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread; every connection it watched is ended (answered ones are closed)."""
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def closed(self, sock: socket.socket) -> None:
        """``sock`` is done (all answered, or its client went away): closed now, or -- while
        this thread still watches it -- shut down, and closed by this thread at its end."""
        fd = sock.fileno()
        with self._lock:
            watched = fd in self._watched and self._watched[fd].sock is sock
            if watched:
                self._hangup.add(fd)
        if watched:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # readable now: the thread sees its end
        else:
            sock.close()

    def kept(self) -> int:
        """How many requests the spacing keeps now (read, not handed over yet)."""
        return len(self._kept)

    def reader_thread(self) -> threading.Thread:
        return self._thread

    # -- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        poll, watched = self._poll.poll, self._watched
        listener, wake = self._listener.fileno(), self._wake_r.fileno()
        spacing, back_to_back, clock = self._spacing_s, self._back_to_back_s, self._clock
        last = -math.inf  # when the last round was handed over
        read: list[Any] = []  # read, not handed over yet (spaced)
        self._kept = read
        hurry = False  # a caller waits on us for its next send: hand over now
        try:
            while not self._stop:
                if read:
                    left = last + spacing - clock()
                    if left <= 0 or hurry:  # one round's requests, every connection's: a group
                        last = clock()
                        round_, read, hurry = read, [], False
                        self._kept = read
                        self._reads(round_)
                        continue
                    events = poll(left * 1000)
                else:
                    events = poll()
                for fd, _events in events:
                    conn = watched.get(fd)
                    if conn is not None:
                        answered = conn.answers.idle_since()  # its caller waits, if recent
                        had = len(read)
                        try:
                            self._read(conn, read)
                        except Exception:  # a bug: this connection ends, the others go on
                            log.exception("local socket: reading a connection failed")
                            self._end(conn)
                        if len(read) > had and answered is not None:
                            hurry = hurry or clock() - answered < back_to_back
                    elif fd == listener:
                        self._accept()
                    elif fd == wake:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
        except Exception:  # a bug: log it, end every connection (clients see the end)
            log.exception("local socket: the reader failed")
            self._stop = True
        finally:
            if read:  # a stop while requests were spaced: the server answers them (refused)
                try:
                    self._reads(read)
                except Exception:
                    log.exception("local socket: handing over the last requests failed")
            for conn in list(watched.values()):
                self._end(conn)
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        """One connection (the next wait reports the listener again while more are waiting)."""
        try:
            sock, _ = self._listener.accept()
        except OSError:  # none after all, or the listener was closed: the server is stopping
            return
        sock.setblocking(True)  # answers are sent blocking by their own thread
        conn = _Conn(sock, self._accepted(sock))
        with self._lock:
            self._watched[conn.fd] = conn
        self._poll.register(conn.fd, select.POLLIN)

    def _read(self, conn: _Conn, read: list[Any]) -> None:
        """What ``conn``'s socket has now: its whole requests go to the server, in order."""
        frames = conn.frames
        try:
            chunk = conn.sock.recv(self.CHUNK, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""  # reset, or shut down by closed(): its end
        if chunk:
            frames.feed(chunk)
        request, answers = self._request, conn.answers
        try:
            while (message := frames.pop()) is not None:
                request(message, answers, read)
        except FrameError as exc:  # unreadable: answer it, then hang up
            self._malformed(exc, answers)
            self._end(conn)
            return
        if not chunk:  # the end (a frame cut short is dropped: its client is gone)
            self._end(conn)

    def _end(self, conn: _Conn) -> None:
        """Stop watching ``conn``: no more requests; it closes once every one is answered."""
        sock, fd = conn.sock, conn.fd
        with contextlib.suppress(KeyError):
            self._poll.unregister(fd)
        with self._lock:
            self._watched.pop(fd, None)
            hangup = fd in self._hangup
            self._hangup.discard(fd)
        conn.answers.end()
        if hangup:
            sock.close()
