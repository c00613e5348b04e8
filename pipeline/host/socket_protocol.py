"""The local socket's wire format: length-prefixed JSON frames, and errors as data.

One frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object).
A request names its ``op`` and carries an ``id`` the answer echoes, so a client may write several
requests before reading (pipelining); answers come back in request order per connection.

    request   {"id": 7, "op": "send", "sender": "main-a", "to": "main-b",
               "body": "<base64>", "kind": "SEND", "ttl_s": null, "turn_id": null,
               "trace_id": "..."}   (optional: continue that trace; default a new one)
    answer    {"id": 7, "ok": {"msgId": "...", "traceId": "...", "tsMs": 1764578000000}}
    refusal   {"id": 7, "error": {"type": "DeliveryError", "reason": "UNKNOWN_RECIPIENT",
               "retriable": false, "message": "...", "context": {"to": "nobody"}}}

``spawn`` and ``stop`` carry ControlClient.spawn / .stop's keyword arguments and are answered
with the queued request's fields (``msg_id``, ``spawn_id`` / ``stop_id``, ``host`` ...). ``poll``
carries GatewayClient.poll's (recipient, sender, limit, wait_s) and is answered with the drained
messages as ``fleet poll`` prints them: ``{"messages": [...], "lines": [...]}``.

A refusal is the :class:`~pipeline.errors.FleetError` the gateway's ``send`` raised, carried
as data and raised again on the client side with the same class, reason, ``retriable`` and
context: a caller cannot tell the socket path from the direct one by its errors.

This module imports no store, envelope or Kafka code: ``fleet send`` through the socket loads it
and :mod:`.socket_client` only (docs/gateway.md, "The local socket").
"""

from __future__ import annotations

import json
import json.scanner
import socket
import struct
from collections.abc import Callable
from typing import Any

from pipeline import errors
from pipeline.errors import FleetError
from pipeline.reasons import Delivery

_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 4 * 1024 * 1024  # the largest record the outbox takes is 1 MiB (base64: 4/3)
OPS = ("send", "spawn", "stop", "poll")


class FrameError(FleetError):
    """A frame that is not one JSON object, or is longer than :data:`MAX_FRAME_BYTES`."""

    reason: str = Delivery.DELIVERY_FAILED


# one encoder for every frame: ``json.dumps`` with options builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def encode_frame(message: dict[str, Any]) -> bytes:
    return frame(_ENCODER.encode(message))


def encode_value(value: Any) -> str:
    """One JSON value as :func:`encode_frame` writes it (for a frame formatted by hand)."""
    return _ENCODER.encode(value)


def frame(text: str) -> bytes:
    """One JSON object's text as a frame: its length, then its UTF-8 bytes."""
    data = text.encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise FrameError(
            f"local socket: a frame of {len(data)} bytes is above {MAX_FRAME_BYTES}",
            context={"size": len(data), "limit": MAX_FRAME_BYTES},
        )
    return _LENGTH.pack(len(data)) + data


# the decoder's own scanner: a frame as the encoders write it (one object, nothing around it)
# is read without json.loads's Python layers (loads, decode, raw_decode and a regex per call)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # (typeshed names the class, not the decoder)
)


def decode_body(data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
        message, end = _SCAN(text, 0) if text[:1] == "{" else (None, -1)
        if end != len(text):  # whitespace around it, extra data, not an object: as json.loads
            message = json.loads(text)
    except StopIteration:  # the scanner's "no value here" (json.loads turns it into an error)
        raise FrameError("local socket: a frame is not JSON") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"local socket: a frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError("local socket: a frame is not a JSON object")
    return message


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame from ``sock``; ``None`` at a clean end of stream (between frames)."""
    head = _read_exactly(sock, _LENGTH.size, allow_eof=True)
    if head is None:
        return None
    (size,) = _LENGTH.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise FrameError(
            f"local socket: a frame of {size} bytes is above {MAX_FRAME_BYTES}",
            context={"size": size, "limit": MAX_FRAME_BYTES},
        )
    body = _read_exactly(sock, size, allow_eof=False)
    assert body is not None
    return decode_body(body)


class FrameReader:
    """The frames of one stream, read in chunks: a small frame is one ``recv`` (not one for its
    length and one for its body), and frames a client pipelined arrive several per ``recv``.
    The same frames, errors and clean end as :func:`read_frame` (the gateway's side of the
    socket reads every request through one of these)."""

    CHUNK = 65536

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def next(self) -> dict[str, Any] | None:
        """The next frame; ``None`` at a clean end of stream (between frames)."""
        while True:
            message = self.pop()
            if message is not None:
                return message
            chunk = self.sock.recv(self.CHUNK)
            if not chunk:
                if not self._buf:
                    return None
                raise ConnectionResetError("local socket: the peer closed the stream mid-frame")
            self._buf += chunk

    def feed(self, chunk: bytes) -> None:
        """Bytes read from the stream by someone else (the gateway's selector)."""
        self._buf += chunk

    def pop(self) -> dict[str, Any] | None:
        """The next whole frame of what was read so far, or ``None`` (read more first)."""
        buf = self._buf
        if len(buf) < _LENGTH.size:
            return None
        size: int = _LENGTH.unpack_from(buf)[0]
        if size > MAX_FRAME_BYTES:
            raise FrameError(
                f"local socket: a frame of {size} bytes is above {MAX_FRAME_BYTES}",
                context={"size": size, "limit": MAX_FRAME_BYTES},
            )
        end = _LENGTH.size + size
        if len(buf) < end:
            return None
        body = bytes(buf[_LENGTH.size : end])
        del buf[:end]
        return decode_body(body)


def _read_exactly(sock: socket.socket, n: int, *, allow_eof: bool) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            if allow_eof and got == 0:
                return None
            raise ConnectionResetError("local socket: the peer closed the stream mid-frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def error_data(exc: FleetError) -> dict[str, Any]:
    """A FleetError as the ``error`` member of an answer."""
    return {
        "type": type(exc).__name__,
        "reason": str(exc.reason),
        "retriable": exc.retriable,
        "message": str(exc.args[0]) if exc.args else "",
        "context": exc.context,
    }


def error_from(data: dict[str, Any]) -> FleetError:
    """The FleetError an ``error`` member describes (its class when ``pipeline.errors`` has it)."""
    cls = getattr(errors, str(data.get("type", "")), None)
    if not (isinstance(cls, type) and issubclass(cls, FleetError)):
        cls = FleetError
    message = str(data.get("message", ""))
    reason = str(data.get("reason") or FleetError.reason)
    context = data.get("context") if isinstance(data.get("context"), dict) else {}
    try:
        exc = cls(message, reason=reason, retriable=bool(data.get("retriable")), context=context)
    except TypeError:  # a class with its own signature (EnvelopeError, OffsetsLostError)
        exc = FleetError(
            message, reason=reason, retriable=bool(data.get("retriable")), context=context
        )
    return exc
