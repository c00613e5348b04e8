"""The gateway's local socket: local entities hand it their sends; it is their store's one writer.

Before it, ``fleet send`` processes, the MCP server and an injected worker's replies each used to
open the host's store and commit one transaction per send, contending with the gateway's relay
and inbox for SQLite's single write lock (whose busy handler sleeps up to 100 ms). Through this
socket the gateway writes for them:

* **One send path.** Each request becomes a :class:`~pipeline.gateway.client.SendRequest` and
  goes through :meth:`GatewayClient.send_all` -- the same checks, rows and reason codes as a
  direct ``send``; there is no second implementation here.
* **Group commit, no hand-off.** The reader queues what one wait found on every connection and,
  when no commit is running, commits itself: every request waiting (up to ``max_batch``) in one
  transaction, one savepoint each (a refused send is answered with its error, the others
  commit). When one is running, that committer takes the queued requests before it lets go.
  One committer at a time (a lock); no writer thread to wake per request.
* **One reader thread.** One thread accepts and reads every connection (``poll``,
  :mod:`.socket_reader`): a connection per call starts no thread and is handed to none.
* **Spaced under load.** While sends keep coming, the reader hands a round over at most every
  ``spacing_s`` (4 ms), so a group holds what those milliseconds brought; an idle send, and a
  caller that waits for each answer before its next send, are committed at once
  (:mod:`.socket_reader`).
* **Wake, not poll.** After each commit the in-process relay is woken (``on_commit``).
* **Permissions.** The socket is created under a temporary name, ``chmod``-ed to ``mode``
  (0600: the gateway's user; 0660: also its group) and only then renamed into place, so it is
  never reachable with wider permissions. A stale socket file (nobody listening) is replaced; a
  live one (another gateway of this host) stops this start with ``CONFIG_INVALID``.
* **Answers.** One per request, in request order per connection (:mod:`.socket_protocol`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.envelope import Envelope
from pipeline.errors import ConfigError, DeliveryError, FleetError, StoreError
from pipeline.host.socket_protocol import (
    FrameError,
    encode_frame,
    encode_value,
    error_data,
    frame,
)
from pipeline.reasons import Config

from .client import GatewayClient, SendRequest
from .metrics import SocketMetrics
from .socket_answers import Answers
from .socket_reader import SocketReader
from .socket_requests import CONTROL_FIELDS, parse_control, parse_poll, parse_send
from .writer_session import WriterSession

if TYPE_CHECKING:
    from pipeline.control.client import ControlClient

log = logging.getLogger(__name__)

SOCKET_MODES = (0o600, 0o660)
SPACING_S = 0.004
"""Under load, the reader hands a group over at most this often (:mod:`.socket_reader`); 0: off."""
BACK_TO_BACK_S = 0.0005
"""A request this soon after its connection's last answer is from a caller waiting on us: not
spaced (:mod:`.socket_reader`)."""


@dataclass(slots=True)
class _Pending:
    """One request: decided once ``result`` is set (nobody waits on it: whoever decides it
    sends the answers, :mod:`.socket_answers`)."""

    id: Any
    request: SendRequest | None
    call: Callable[[], Any] | None = None  # a control request, run by the committer on its own
    kind: str = ""  # for the metrics: the send's kind, or SPAWN / STOP
    result: Envelope | dict[str, Any] | FleetError | None = None
    answers: Answers | None = None  # its connection's, sent in order by whoever decides it

    def finish(self, result: Envelope | dict[str, Any] | FleetError) -> None:
        self.result = result
        if self.answers is not None:
            self.answers.flush()

    def answer(self) -> dict[str, Any]:
        r = self.result
        if isinstance(r, dict):
            return {"id": self.id, "ok": r}
        if isinstance(r, Envelope):
            return {"id": self.id, "ok": {"msgId": r.msg_id, "traceId": r.trace_id,
                                          "tsMs": r.ts_ms, "turnId": r.turn_id}}  # fmt: skip
        assert isinstance(r, FleetError)
        return {"id": self.id, "error": error_data(r)}

    def frame(self) -> bytes:
        """:meth:`answer` as a frame; a queued send's (the common answer) formatted by hand."""
        r = self.result
        if not isinstance(r, Envelope):
            return encode_frame(self.answer())
        ident = str(self.id) if type(self.id) is int else encode_value(self.id)
        turn = "null" if r.turn_id is None else encode_value(r.turn_id)
        return frame(f'{{"id":{ident},"ok":{{"msgId":{encode_value(r.msg_id)},'
                     f'"traceId":{encode_value(r.trace_id)},"tsMs":{r.ts_ms},"turnId":{turn}}}}}')  # fmt: skip


class SocketServer:
    """Serve ``client``'s sends on a UNIX socket at ``path``; see the module docstring."""

    def __init__(
        self,
        *,
        path: str,
        client: GatewayClient,
        on_commit: Callable[[], None] = lambda: None,
        mode: int = 0o600,
        max_batch: int = 256,
        metrics: SocketMetrics | None = None,
        control: ControlClient | None = None,
        spacing_s: float = SPACING_S,
        back_to_back_s: float = BACK_TO_BACK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in SOCKET_MODES:
            raise ConfigError(
                f"socket_mode = {mode:#o}: use 0o600 (the gateway's user) or 0o660 (and its group)",
                reason=Config.CONFIG_INVALID,
                context={"key": "socket_mode", "value": mode},
            )
        self.path = path
        self.client = client
        self.on_commit = on_commit
        self.mode = mode
        self.max_batch = max_batch
        self.metrics = metrics
        self.control = control
        self.spacing_s = spacing_s
        self.back_to_back_s = back_to_back_s
        self._clock = clock  # the spacing's (a test moves it)
        # what one read of a connection brought, in order; taken by whoever holds _committing
        self._queue: queue.SimpleQueue[list[_Pending]] = queue.SimpleQueue()
        self._committing = threading.Lock()
        self._carry: list[_Pending] = []  # read, but past a group's max_batch: the next group's
        self._listener: socket.socket | None = None
        self._inode: int | None = None
        self._stop = threading.Event()
        self._reader: SocketReader | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._writer = WriterSession(client.sessions)  # used under _committing only

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> SocketServer:
        self._listener = self._bind()
        self._reader = SocketReader(
            self._listener,
            accepted=self._accepted,
            request=self._request,
            malformed=self._malformed,
            reads=self._reads,
            spacing_s=self.spacing_s,
            back_to_back_s=self.back_to_back_s,
            clock=self._clock,
        )
        self._reader.start()
        return self

    def run(self, stop: threading.Event) -> None:
        """A gateway loop: serve until ``stop``; a socket that cannot be bound is logged and the
        gateway runs without it (local senders then write the store directly, as before)."""
        try:
            self.start()
        except (OSError, ConfigError) as exc:
            log.warning("local socket %s not served (%s): sends write the store directly",
                        self.path, exc)  # fmt: skip
            stop.wait()
            return
        try:
            stop.wait()
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._unlink_if_ours()
            if self._reader is not None:
                self._reader.stop()  # every connection ended: it reads nothing more
            self._listener.close()
            self._listener = None
        with self._lock:
            for conn in list(self._conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        # a commit under way ends first; later reads are refused by whoever takes the lock
        if not self._committing.acquire(timeout=5):
            return
        try:
            self._refuse_queued()
            self._writer.close()
        finally:
            self._committing.release()

    def _refuse_queued(self) -> None:
        """Accepted but never committed (the server is stopping): say so, nothing was queued."""
        self._queue.put(self._carry)  # (the caller holds the commit lock)
        self._carry = []
        while True:
            try:
                reads = self._queue.get_nowait()
            except queue.Empty:
                return
            for pending in reads:
                pending.finish(
                    DeliveryError(
                        "the gateway is stopping; the send was not queued", retriable=True
                    )
                )
            for answers in {id(p.answers): p.answers for p in reads if p.answers}.values():
                answers.flush()  # said before the connections are shut down

    def _bind(self) -> socket.socket:
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.path)
            except OSError:
                os.unlink(self.path)  # stale: its gateway is gone
            else:
                raise ConfigError(
                    f"local socket {self.path}: another gateway is serving it",
                    reason=Config.CONFIG_INVALID,
                    context={"key": "socket_path", "value": self.path},
                )
            finally:
                probe.close()
        tmp = f"{self.path}.{os.getpid()}~"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            sock.bind(tmp)
            os.chmod(tmp, self.mode)  # before it has its name: never reachable wider than mode
            os.rename(tmp, self.path)
            sock.listen(128)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._inode = os.stat(self.path).st_ino
        return sock

    def _unlink_if_ours(self) -> None:
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)

    # -- requests (called by the reader thread, :mod:`.socket_reader`) ------------------------
    def _accepted(self, conn: socket.socket) -> Answers:
        with self._lock:
            self._conns.add(conn)
        return Answers(conn, lambda: self._closed(conn))

    def _request(self, message: dict[str, Any], answers: Answers, read: list[_Pending]) -> None:
        """One request, in order: a send or a control request goes in ``read`` (committed with
        its round, :meth:`_reads`); a malformed one is refused at once; a poll runs on its own."""
        op = message.get("op")
        pending = _Pending(message.get("id"), None, answers=answers)
        try:
            if op == "send":
                pending.request = parse_send(message)
            elif op in CONTROL_FIELDS and self.control is not None:
                pending.kind = str(op).upper()
                pending.call = parse_control(message, self.control)
            elif op == "poll":
                pending.kind = "POLL"
                kwargs = parse_poll(message)
                answers.add(pending)  # before its thread can decide it
                self._poll(pending, kwargs)
                return
            else:
                raise ConfigError(f"local socket: unknown op {op!r}")
        except FleetError as exc:
            pending.finish(exc)
            answers.add(pending)  # decided: answered now, in order
            if self.metrics is not None:
                kind = message.get("kind", "SEND") if op == "send" else op
                self.metrics.request(str(kind).upper(), "malformed", exc.reason)
        else:
            answers.add(pending)  # before a committer can decide it
            read.append(pending)

    def _malformed(self, exc: FrameError, answers: Answers) -> None:
        """An unreadable frame: answered (the reader then hangs up)."""
        if self.metrics is not None:
            self.metrics.request(None, "malformed", exc.reason)
        pending = _Pending(id=None, request=None)
        pending.finish(exc)
        answers.add(pending)

    def _reads(self, read: list[_Pending]) -> None:
        """What one wait of the reader brought: committed at once when nothing is queued or
        carried before it and no commit runs (the common case: one group, no queue), else
        queued and committed in order (:meth:`_commit_queued`)."""
        if (
            not self._carry
            and len(read) <= self.max_batch
            and self._queue.empty()
            and self._committing.acquire(blocking=False)
        ):
            try:
                if not self._carry and self._queue.empty() and not self._stop.is_set():
                    self.commit(read, writer=self._writer)
                    read = []
            finally:
                self._committing.release()
            if not read and not self._carry and self._queue.empty():
                return
        if read:
            self._queue.put(read)
        self._commit_queued()

    def _poll(self, pending: _Pending, kwargs: dict[str, Any]) -> None:
        """A poll reads (and drains) held rows on its own thread: with ``wait_s`` it is an open
        pull that may block for that long, and must hold up neither the commits nor this
        connection's next requests (answers still go out in request order)."""

        def run() -> None:
            from . import render

            try:
                got = self.client.poll(**kwargs)
                pending.finish({"messages": [render.held_dict(m) for m in got],
                                "lines": [render.held_line(m) for m in got]})  # fmt: skip
            except FleetError as exc:
                pending.finish(exc)
            except Exception as exc:  # a store failure: nothing was drained
                log.exception("local socket: a poll failed")
                pending.finish(StoreError(f"the gateway could not poll: {exc}", retriable=True))

        threading.Thread(target=run, name="gw-socket-poll", daemon=True).start()

    def _closed(self, conn: socket.socket) -> None:
        """Every answer of ``conn`` is out (or its client went away): hang up."""
        with self._lock:
            self._conns.discard(conn)
        if self._reader is not None:
            self._reader.closed(conn)  # closed by the reader if it still watches it
        else:
            conn.close()

    # -- the committer -------------------------------------------------------------------------
    def _commit_queued(self) -> None:
        """Commit what is queued, unless another thread is committing: that one takes it.

        Whoever queued reads and then finds the lock taken leaves them to its holder, which
        looks at the queue again after letting go; so nothing queued is left behind, and no
        thread is woken to commit what a reader could commit itself."""
        while self._committing.acquire(blocking=False):
            try:
                if self._stop.is_set():
                    self._refuse_queued()
                    self._writer.close()
                    return
                batch, self._carry = self._carry, []
                waiting = self._queue  # (only the lock's holder takes from it)
                while len(batch) < self.max_batch and not waiting.empty():
                    batch += waiting.get_nowait()
                batch, self._carry = batch[: self.max_batch], batch[self.max_batch :]
                if batch:
                    self.commit(batch, writer=self._writer)
            finally:
                self._committing.release()
            if not self._carry and self._queue.empty():
                return

    def commit(self, batch: list[_Pending], *, writer: WriterSession | None = None) -> None:
        """One transaction for ``batch``'s sends (each gets its envelope or its error), then each
        control request on its own, in order. ``writer``: on its held connection (the caller
        holds the commit lock)."""
        sends = [p for p in batch if p.request is not None]
        if sends:
            self._commit_sends(sends, writer)
        if len(sends) < len(batch):
            for pending in batch:
                if pending.call is not None:
                    self._run_control(pending)

    def _run_control(self, pending: _Pending) -> None:
        assert pending.call is not None
        try:
            result: dict[str, Any] | FleetError = dataclasses.asdict(pending.call())
        except FleetError as exc:
            result = exc
        except Exception as exc:  # a store failure: nothing was queued
            log.exception("local socket: a %s request failed", pending.kind)
            result = StoreError(f"the gateway could not commit the request: {exc}", retriable=True)
        if isinstance(result, dict):
            self.on_commit()
        if self.metrics is not None:
            if isinstance(result, dict):
                self.metrics.request(pending.kind, "queued")
            elif isinstance(result, StoreError):
                self.metrics.request(pending.kind, "failed")
            else:
                self.metrics.request(pending.kind, "refused", result.reason)
        pending.finish(result)

    def _commit_sends(self, batch: list[_Pending], writer: WriterSession | None) -> None:
        """``batch``'s sends (every one has a request) in one group commit, then their answers:
        every result first, then each connection's answers in one write, not one per send."""
        requests: list[SendRequest] = [p.request for p in batch]  # type: ignore[misc]
        metrics = self.metrics
        started = time.perf_counter() if metrics is not None else 0.0
        failed = False
        try:
            results: list[Envelope | FleetError] = self.client.send_all(requests, writer=writer)
        except FleetError as exc:
            results, failed = [exc] * len(requests), True
        except Exception as exc:  # a store failure: nothing of the batch is queued
            log.exception("local socket: a group commit of %d sends failed", len(requests))
            err = StoreError(f"the gateway could not commit the send: {exc}", retriable=True)
            results, failed = [err] * len(requests), True
        queued = False
        for pending, result in zip(batch, results, strict=True):
            pending.result = result
            if type(result) is Envelope:
                queued = True
        if queued:
            self.on_commit()
        if metrics is not None:
            self._count(requests, results, failed, time.perf_counter() - started)
        answers = batch[0].answers
        if len(batch) == 1:
            if answers is not None:
                answers.flush()
            return
        for answers in {id(p.answers): p.answers for p in batch if p.answers is not None}.values():
            answers.flush()

    def _count(
        self,
        requests: list[SendRequest],
        results: list[Envelope | FleetError],
        failed: bool,
        seconds: float,
    ) -> None:
        metrics = self.metrics
        assert metrics is not None
        metrics.group_size.observe(len(requests))
        metrics.commit_seconds.observe(seconds)
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, Envelope):
                metrics.request(request.kind, "queued")
            elif failed:
                metrics.request(request.kind, "failed")
            else:
                metrics.request(request.kind, "refused", result.reason)
