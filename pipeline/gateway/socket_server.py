"""The gateway's local socket: local entities hand it their sends; it is their store's one writer.

Before it, ``fleet send`` processes, the MCP server and an injected worker's replies each used to
open the host's store and commit one transaction per send, contending with the gateway's relay
and inbox for SQLite's single write lock (whose busy handler sleeps up to 100 ms). Through this
socket the gateway writes for them:

* **One send path.** Each request becomes a :class:`~pipeline.gateway.client.SendRequest` and
  goes through :meth:`GatewayClient.send_all` -- the same checks, rows and reason codes as a
  direct ``send``; there is no second implementation here.
* **Group commit.** One writer thread takes every request waiting when it is free (up to
  ``max_batch``) and commits them in one transaction, one savepoint each: a refused send is
  answered with its error, the others commit.
* **Wake, not poll.** After each commit the in-process relay is woken (``on_commit``).
* **Permissions.** The socket is created under a temporary name, ``chmod``-ed to ``mode``
  (0600: the gateway's user; 0660: also its group) and only then renamed into place, so it is
  never reachable with wider permissions. A stale socket file (nobody listening) is replaced; a
  live one (another gateway of this host) stops this start with ``CONFIG_INVALID``.
* **Answers.** One per request, in request order per connection (:mod:`.socket_protocol`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import functools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.envelope import Envelope, Kind
from pipeline.errors import ConfigError, DeliveryError, FleetError, StoreError
from pipeline.host.socket_protocol import FrameError, FrameReader, error_data
from pipeline.reasons import Config, Verification

from .client import GatewayClient, SendRequest
from .metrics import SocketMetrics
from .socket_answers import Answers
from .writer_session import WriterSession

if TYPE_CHECKING:
    from pipeline.control.client import ControlClient

log = logging.getLogger(__name__)

SOCKET_MODES = (0o600, 0o660)


_KINDS = {k.value: k for k in Kind}


def parse_kind(text: str) -> Kind:
    """``text`` as a :class:`Kind` (any case), or ``UNKNOWN_KIND`` -- for the CLI and the socket."""
    kind = _KINDS.get(text)  # the wire's own spelling: a dict look-up, not Enum's constructor
    if kind is not None:
        return kind
    try:
        return Kind(str(text).upper())
    except ValueError:
        raise ConfigError(f"unknown kind {text!r}", reason=Verification.UNKNOWN_KIND) from None


def parse_send(message: dict[str, Any]) -> SendRequest:
    """A ``send`` request's fields as a SendRequest; a malformed one is ``CONFIG_INVALID``."""
    try:
        sender, to, body = message["sender"], message["to"], message["body"]
        if not isinstance(sender, str) or not isinstance(to, str) or not isinstance(body, str):
            raise TypeError("sender, to and body must be strings")
        ttl, turn_id, trace_id = (
            message.get("ttl_s"),
            message.get("turn_id"),
            message.get("trace_id"),
        )
        if ttl is not None and not isinstance(ttl, int | float):
            raise TypeError("ttl_s must be a number")
        if turn_id is not None and not isinstance(turn_id, str):
            raise TypeError("turn_id must be a string")
        if trace_id is not None and (not isinstance(trace_id, str) or not trace_id):
            raise TypeError("trace_id must be a non-empty string")
        raw = base64.b64decode(body, validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise ConfigError(f"local socket: malformed send request: {exc}") from None
    return SendRequest(
        sender=sender,
        to=to,
        body=raw,
        kind=parse_kind(message.get("kind", "SEND")),
        ttl_s=float(ttl) if ttl is not None else None,
        turn_id=turn_id,
        trace_id=trace_id,
    )


# The control plane's requests (ControlClient.spawn / .stop): their fields and value types.
_TEXT, _MAYBE_TEXT, _MAYBE_INT = (str,), (str, type(None)), (int, type(None))
CONTROL_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "spawn": {"requester": _TEXT, "host": _TEXT, "profile": _TEXT, "spawn_id": _MAYBE_TEXT,
              "parent": _MAYBE_TEXT, "job": _MAYBE_TEXT, "brief": _MAYBE_TEXT,
              "budget": _MAYBE_INT},
    "stop": {"requester": _TEXT, "gid": _TEXT, "host": _MAYBE_TEXT, "reason": _MAYBE_TEXT,
             "stop_id": _MAYBE_TEXT},
}  # fmt: skip


def parse_control(message: dict[str, Any], control: ControlClient) -> Callable[[], Any]:
    """A ``spawn`` / ``stop`` request as the ControlClient call it asks for; a malformed one is
    ``CONFIG_INVALID``."""
    op = str(message.get("op"))
    fields = CONTROL_FIELDS[op]
    kwargs: dict[str, Any] = {}
    for name, types in fields.items():
        value = message.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ConfigError(f"local socket: malformed {op} request: {name} is {value!r}")
        kwargs[name] = value
    return functools.partial(control.spawn if op == "spawn" else control.stop, **kwargs)


def parse_poll(message: dict[str, Any]) -> dict[str, Any]:
    """A ``poll`` request as GatewayClient.poll's arguments; a malformed one is
    ``CONFIG_INVALID``."""
    recipient, sender = message.get("recipient"), message.get("sender")
    limit, wait_s = message.get("limit", 100), message.get("wait_s", 0.0)
    if (
        not isinstance(recipient, str)
        or not isinstance(sender, str | None)
        or not isinstance(limit, int)
        or isinstance(limit, bool)
        or not isinstance(wait_s, int | float)
        or isinstance(wait_s, bool)
    ):
        raise ConfigError(f"local socket: malformed poll request: {message!r}")
    return {"recipient": recipient, "sender": sender, "limit": limit, "wait_s": float(wait_s)}


@dataclass(slots=True)
class _Pending:
    """One request: decided once ``result`` is set (nobody waits on it: whoever decides it
    sends the answers, :mod:`.socket_answers`)."""

    id: Any
    request: SendRequest | None
    call: Callable[[], Any] | None = None  # a control request, run by the writer on its own
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
        # SimpleQueue: a put is one C call, no Condition to notify in Python (a send's share)
        self._queue: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._listener: socket.socket | None = None
        self._inode: int | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._writer = WriterSession(client.sessions)
        self._writer_thread: int | None = None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> SocketServer:
        self._listener = self._bind()
        for name, target in (("accept", self._accept), ("writer", self._write)):
            t = threading.Thread(target=target, name=f"gw-socket-{name}", daemon=True)
            t.start()
            self._threads.append(t)
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
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
            self._listener.close()
            self._listener = None
        with self._lock:
            for conn in list(self._conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        self._threads.clear()
        while True:  # accepted but never committed: say so, nothing was queued
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                break
            pending.finish(
                DeliveryError("the gateway is stopping; the send was not queued", retriable=True)
            )

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

    # -- connections ----------------------------------------------------------------------------
    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._conns.add(conn)
            answers = Answers(conn)
            for target, args in (
                (self._read, (conn, answers)),
                (answers.run, (functools.partial(self._closed, conn),)),
            ):
                threading.Thread(
                    target=target, args=args, name="gw-socket-conn", daemon=True
                ).start()

    def _read(self, conn: socket.socket, answers: Answers) -> None:
        """Requests in, in order: each is queued for the writer (or refused at once)."""
        frames = FrameReader(conn)
        try:
            while True:
                try:
                    message = frames.next()
                except FrameError as exc:  # unreadable: answer it, then hang up
                    if self.metrics is not None:
                        self.metrics.request(None, "malformed", exc.reason)
                    pending = _Pending(id=None, request=None)
                    pending.finish(exc)
                    answers.add(pending)
                    return
                if message is None:
                    return
                op = message.get("op")
                pending = _Pending(
                    id=message.get("id"), request=None, kind=str(op).upper(), answers=answers
                )
                try:
                    if op == "send":
                        pending.kind = str(message.get("kind", "SEND")).upper()
                        pending.request = parse_send(message)
                    elif op in CONTROL_FIELDS and self.control is not None:
                        pending.call = parse_control(message, self.control)
                    elif op == "poll":
                        kwargs = parse_poll(message)
                        answers.add(pending)  # before its thread can decide it
                        self._poll(pending, kwargs)
                        continue
                    else:
                        raise ConfigError(f"local socket: unknown op {op!r}")
                except FleetError as exc:
                    pending.finish(exc)
                    answers.add(pending)  # decided: answered now, in order
                    if self.metrics is not None:
                        self.metrics.request(pending.kind, "malformed", exc.reason)
                else:
                    answers.add(pending)  # before the writer can decide it
                    self._queue.put(pending)
        except OSError:
            return
        finally:
            answers.end()

    def _poll(self, pending: _Pending, kwargs: dict[str, Any]) -> None:
        """A poll reads (and drains) held rows on its own thread: with ``wait_s`` it is an open
        pull that may block for that long, and must hold up neither the writer nor this
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
        conn.close()

    # -- the writer ----------------------------------------------------------------------------
    def _write(self) -> None:
        self._writer_thread = threading.get_ident()
        try:
            while not self._stop.is_set():
                try:
                    first = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                batch = [first]
                while len(batch) < self.max_batch:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                self.commit(batch)
        finally:
            self._writer_thread = None
            self._writer.close()

    def commit(self, batch: list[_Pending]) -> None:
        """One transaction for ``batch``'s sends (each gets its envelope or its error), then each
        control request on its own, in order."""
        self._commit_sends([p for p in batch if p.request is not None])
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

    def _commit_sends(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        requests = [p.request for p in batch if p.request is not None]
        started = time.perf_counter()
        failed = False
        try:
            # the writer thread's groups run on its held Session (writer_session.py)
            writer = self._writer if threading.get_ident() == self._writer_thread else None
            results: list[Envelope | FleetError] = list(
                self.client.send_all(requests, writer=writer)
            )
        except FleetError as exc:
            results, failed = [exc] * len(requests), True
        except Exception as exc:  # a store failure: nothing of the batch is queued
            log.exception("local socket: a group commit of %d sends failed", len(requests))
            err = StoreError(f"the gateway could not commit the send: {exc}", retriable=True)
            results, failed = [err] * len(requests), True
        if any(isinstance(r, Envelope) for r in results):
            self.on_commit()
        if self.metrics is not None:
            self._count(requests, results, failed, time.perf_counter() - started)
        # every result first, then each connection's answers in one send: a group's answers to
        # one client go out as one write, not one per send
        for pending, result in zip(batch, results, strict=True):
            pending.result = result
        for answers in {id(p.answers): p.answers for p in batch if p.answers is not None}.values():
            answers.flush()

    def _count(
        self,
        requests: list[SendRequest],
        results: list[Envelope | FleetError],
        failed: bool,
        seconds: float,
    ) -> None:
        assert self.metrics is not None
        self.metrics.group_size.observe(len(requests))
        self.metrics.commit_seconds.observe(seconds)
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, Envelope):
                self.metrics.request(request.kind, "queued")
            elif failed:
                self.metrics.request(request.kind, "failed")
            else:
                self.metrics.request(request.kind, "refused", result.reason)
