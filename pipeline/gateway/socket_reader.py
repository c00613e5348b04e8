"""The local socket's reader: one thread accepts and reads every connection (a selector).

A thread per connection used to read each one, and a connection per call (``fleet send``, the
MCP server) was accepted by one thread and handed to another: a wake-up and a GIL hand-over per
call, on a two-core machine about as much CPU as the send's statements. Here one thread waits
on the listener and on every connection at once. What one wait finds ready -- new connections,
the requests of any connection -- is read, and the requests of that round go to the server
together (:meth:`SocketServer._reads`: its group commit) before the thread waits again. A
request is read whole before it is handled; a frame that arrives in pieces is kept until the
rest comes.

**Who closes.** Only this thread closes a connection it still watches. Whoever finds a watched
connection done (its answers' thread, a committer whose answer could not be sent) calls
:meth:`SocketReader.closed`, which shuts it down instead: this thread then sees its end, stops
watching it and closes it. So a descriptor is never closed while the selector holds it (a new
connection could get its number).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

from pipeline.host.socket_protocol import FrameError, FrameReader

from .socket_answers import Answers

log = logging.getLogger(__name__)

Request = Callable[[dict[str, Any], Answers, list[Any]], None]
"""The server: one decoded request of a connection; what is to be committed goes in the list."""


class _Conn:
    __slots__ = ("answers", "frames", "sock")

    def __init__(self, sock: socket.socket, answers: Answers) -> None:
        self.sock = sock
        self.answers = answers
        self.frames = FrameReader(sock)


class SocketReader:
    """Accept on ``listener`` and read every connection on one thread (module docstring)."""

    CHUNK = FrameReader.CHUNK

    def __init__(
        self,
        listener: socket.socket,
        *,
        accepted: Callable[[socket.socket], Answers],
        request: Request,
        malformed: Callable[[FrameError, Answers], None],
        reads: Callable[[list[Any]], None],
    ) -> None:
        self._listener = listener
        self._accepted = accepted
        self._request = request
        self._malformed = malformed
        self._reads = reads
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._watched: dict[socket.socket, _Conn] = {}  # under _lock
        self._hangup: set[socket.socket] = set()  # done while watched: closed when unwatched
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="gw-socket-reader", daemon=True)

    def start(self) -> None:
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
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
        with self._lock:
            watched = sock in self._watched
            if watched:
                self._hangup.add(sock)
        if watched:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # readable now: the thread sees its end
        else:
            sock.close()

    def reader_thread(self) -> threading.Thread:
        return self._thread

    # -- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        select = self._selector.select
        listener, wake = self._listener, self._wake_r
        try:
            while not self._stop:
                read: list[Any] = []
                for key, _events in select():
                    sock = key.fileobj
                    if key.data is not None:
                        try:
                            self._read(key.data, read)
                        except Exception:  # a bug: this connection ends, the others go on
                            log.exception("local socket: reading a connection failed")
                            self._end(key.data)
                    elif sock is listener:
                        self._accept()
                    elif sock is wake:
                        with contextlib.suppress(OSError):
                            wake.recv(64)
                if read:  # one round's requests, every connection's: one group
                    self._reads(read)
        except Exception:  # a bug: log it, end every connection (clients see the end)
            log.exception("local socket: the reader failed")
            self._stop = True
        finally:
            for conn in list(self._watched.values()):
                self._end(conn)
            with contextlib.suppress(Exception):
                self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the listener was closed: the server is stopping
                return
            sock.setblocking(True)  # answers are sent blocking by their own thread
            conn = _Conn(sock, self._accepted(sock))
            with self._lock:
                self._watched[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

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
        sock = conn.sock
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        with self._lock:
            self._watched.pop(sock, None)
            hangup = sock in self._hangup
            self._hangup.discard(sock)
        conn.answers.end()
        if hangup:
            sock.close()
