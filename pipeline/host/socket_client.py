"""The light half of the local socket: what ``fleet send`` uses to hand a send to its gateway.

It imports neither SQLAlchemy nor confluent_kafka nor the envelope (no ``cryptography``): the
running gateway validates, signs and group-commits the send in its own store (docs/gateway.md).

When no gateway answers -- no socket file, or a socket nobody listens on -- :meth:`connect`
raises :class:`GatewayUnavailable` before anything was sent, and the caller writes the store
directly, as before the socket existed. Once a request was written, a lost connection is a
retriable ``DELIVERY_FAILED`` and never a silent retry: the gateway may have committed it.
"""

from __future__ import annotations

import binascii
import socket
from collections.abc import Sequence
from typing import Any, NamedTuple

from pipeline.errors import DeliveryError, FleetError
from pipeline.host.socket_protocol import encode_frame, error_from, read_frame
from pipeline.reasons import Delivery


class GatewayUnavailable(Exception):
    """Nothing listens on the socket (absent, refused, not admitted): nothing was sent."""


class Queued(NamedTuple):
    """A send the gateway committed to its outbox. (A NamedTuple, not a dataclass: one is made in
    a few microseconds at import, a frozen dataclass takes milliseconds -- ``fleet send`` pays
    every import once per message.)"""

    msg_id: str
    trace_id: str
    ts_ms: int
    turn_id: str | None = None


class SocketClient:
    """One connection to the gateway's local socket. Not thread-safe: one per thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._next_id = 0

    @classmethod
    def connect(cls, path: str, *, timeout_s: float = 30.0) -> SocketClient:
        """Connect to ``path``; :class:`GatewayUnavailable` when no gateway is there."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
        except OSError as exc:  # FileNotFoundError, ConnectionRefusedError, PermissionError ...
            sock.close()
            raise GatewayUnavailable(f"{path}: {exc.strerror or exc}") from None
        return cls(sock)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SocketClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send(
        self,
        *,
        sender: str,
        to: str,
        body: bytes,
        kind: str = "SEND",
        ttl_s: float | None = None,
        turn_id: str | None = None,
        trace_id: str | None = None,
    ) -> Queued:
        """Queue one message through the gateway; a refusal raises its FleetError."""
        result = self.send_many([{"sender": sender, "to": to, "body": body, "kind": kind,
                                  "ttl_s": ttl_s, "turn_id": turn_id,
                                  "trace_id": trace_id}])[0]  # fmt: skip
        if isinstance(result, FleetError):
            raise result
        return result

    # The conversation verbs, as GatewayClient.ask/answer/abandon (same kinds, defaults, turns).
    def ask(
        self,
        *,
        sender: str,
        to: str,
        body: bytes,
        ttl_s: float = 120.0,
        trace_id: str | None = None,
    ) -> Queued:
        """A worker asks a main: a new turn (its id minted here, as GatewayClient.ask does)."""
        import uuid  # only an ask needs it (each `fleet` process pays for its imports)

        turn = uuid.uuid4().hex
        return self.send(sender=sender, to=to, body=body, kind="ASK", ttl_s=ttl_s, turn_id=turn,
                         trace_id=trace_id)  # fmt: skip

    def answer(
        self,
        *,
        sender: str,
        to: str,
        turn_id: str,
        body: bytes,
        ttl_s: float = 120.0,
        trace_id: str | None = None,
    ) -> Queued:
        """``trace_id`` None: the gateway continues the trace of the ASK of ``turn_id``."""
        return self.send(sender=sender, to=to, body=body, kind="ANSWER", ttl_s=ttl_s,
                         turn_id=turn_id, trace_id=trace_id)  # fmt: skip

    def abandon(self, *, sender: str, to: str, turn_id: str) -> Queued:
        """The asker gives up its turn (closed in the gateway's transaction that queues the
        ABANDONED notice): a late ANSWER will get TOO_LATE."""
        return self.send(sender=sender, to=to, body=b"", kind="ABANDONED", turn_id=turn_id)

    def send_many(self, sends: Sequence[dict[str, Any]]) -> list[Queued | FleetError]:
        """Pipeline ``sends`` (each: sender, to, body, kind, ttl_s) on this connection and return
        one result per send, in order; the gateway commits them in as few transactions as it can.
        """
        first = self._next_id
        out = bytearray()
        for i, s in enumerate(sends):
            request = {
                "id": first + i,
                "op": "send",
                "sender": s["sender"],
                "to": s["to"],
                # base64.b64encode's own call, without importing base64
                "body": binascii.b2a_base64(s["body"], newline=False).decode("ascii"),
                "kind": s.get("kind", "SEND"),
                "ttl_s": s.get("ttl_s"),
                "turn_id": s.get("turn_id"),
            }
            if s.get("trace_id"):  # only when given: an older gateway's frames stay as they were
                request["trace_id"] = s["trace_id"]
            out += encode_frame(request)
        answers = self._exchange(out, first, len(sends))
        return [a if isinstance(a, FleetError) else _queued(a) for a in answers]

    def control(self, op: str, **fields: Any) -> dict[str, Any]:
        """A ``spawn`` or ``stop`` through the gateway (ControlClient's keyword arguments); the
        queued request's fields, or its refusal raised."""
        first = self._next_id
        (answer,) = self._exchange(encode_frame({"id": first, "op": op, **fields}), first, 1)
        if isinstance(answer, FleetError):
            raise answer
        return answer

    def poll(
        self, recipient: str, *, sender: str | None = None, limit: int = 100, wait_s: float = 0.0
    ) -> dict[str, Any]:
        """Drain ``recipient``'s held messages through the gateway (an open pull while it
        waits): ``{"messages": [held_dict ...], "lines": [held_line ...]}``."""
        first = self._next_id
        request = {"id": first, "op": "poll", "recipient": recipient, "sender": sender,
                   "limit": limit, "wait_s": wait_s}  # fmt: skip
        timeout = self._sock.gettimeout()
        if timeout is not None:  # the gateway answers once the wait is over
            self._sock.settimeout(timeout + max(0.0, wait_s))
        try:
            (answer,) = self._exchange(encode_frame(request), first, 1)
        finally:
            self._sock.settimeout(timeout)
        if isinstance(answer, FleetError):
            raise answer
        return answer

    def _exchange(
        self, out: bytes | bytearray, first: int, n: int
    ) -> list[dict[str, Any] | FleetError]:
        self._next_id = first + n
        try:
            self._sock.sendall(out)
            return [self._answer(first + i) for i in range(n)]
        except OSError as exc:
            raise DeliveryError(
                f"the gateway's local socket failed before it answered ({exc}); the request may "
                "or may not be queued: look in `fleet outbox` before sending again",
                reason=Delivery.DELIVERY_FAILED,
                retriable=True,
            ) from None

    def _answer(self, want: int) -> dict[str, Any] | FleetError:
        answer = read_frame(self._sock)
        if answer is None:
            raise ConnectionResetError("the gateway closed the connection")
        if answer.get("id") != want:
            raise ConnectionResetError(f"answer {answer.get('id')} where {want} was due")
        if "error" in answer:
            return error_from(answer["error"])
        ok: dict[str, Any] = answer["ok"]
        return ok


def _queued(ok: dict[str, Any]) -> Queued:
    return Queued(msg_id=ok["msgId"], trace_id=ok["traceId"], ts_ms=int(ok["tsMs"]),
                  turn_id=ok.get("turnId"))  # fmt: skip
