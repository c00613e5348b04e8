"""The frames a long-lived command injector and its child exchange (docs/injectors.md).

Gateway -> child, one frame per brief: a header line of UTF-8 JSON ending in ``\\n``::

    {"msgId": "...", "from": "A-main", "to": "B-w1", "kind": "SEND", "traceId": "...", "length": 1234}

then exactly ``length`` body bytes (raw, any bytes). Child -> gateway, one answer line per
frame, in order::

    {"msgId": "...", "status": "ok"}            # injected
    {"msgId": "...", "status": "retry"}         # busy, nothing injected (one-shot exit 75)
    {"msgId": "...", "status": "error", "error": "why"}   # not injected, final

The header's keys carry what the one-shot form passes as ``FLEET_MSG_ID``, ``FLEET_FROM``,
``FLEET_TO``, ``FLEET_KIND`` and ``FLEET_TRACE_ID``. Unknown header keys are to be ignored by a child (new ones may
come); anything on the child's stdout that is not an answer line breaks the protocol.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import BinaryIO, Final

OK: Final = "ok"
RETRY: Final = "retry"
ERROR: Final = "error"
STATUSES: Final = (OK, RETRY, ERROR)
MAX_HEADER_BYTES: Final = 64 * 1024
MAX_ANSWER_BYTES: Final = 64 * 1024
# json.dumps with separators builds an encoder per call; a frame per brief uses this one
_compact = json.JSONEncoder(separators=(",", ":")).encode
# text JSON writes as it is (printable ASCII but the quote and the backslash): no escapes
_PLAIN = re.compile(r"[ !#-\[\]-~]*")


class FrameError(ValueError):
    """A line that is not a frame of this protocol."""


@dataclass(frozen=True, slots=True)
class Brief:
    """One request frame, as a child reads it."""

    msg_id: str
    sender: str
    to: str
    kind: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    msg_id: str
    status: str
    error: str = ""


def request(
    *, msg_id: str, sender: str, to: str, kind: str, body: bytes, trace_id: str = ""
) -> bytes:
    """The bytes of one request frame: header line, then the body (``traceId``: the brief's,
    what the one-shot form passes as ``FLEET_TRACE_ID``)."""
    if _PLAIN.fullmatch(f"{msg_id}{sender}{to}{kind}{trace_id}") is not None:
        # nothing to escape (as minted ids and gids are): the bytes json writes, without it
        trace = b',"traceId":"%s"' % trace_id.encode() if trace_id else b""
        head = b'{"msgId":"%s","from":"%s","to":"%s","kind":"%s"%s,"length":%d}\n' % (
            msg_id.encode(),
            sender.encode(),
            to.encode(),
            kind.encode(),
            trace,
            len(body),
        )
        return head + body
    header: dict[str, object] = {"msgId": msg_id, "from": sender, "to": to, "kind": kind}
    if trace_id:
        header["traceId"] = trace_id
    header["length"] = len(body)
    return _compact(header).encode() + b"\n" + body


def answer(msg_id: str, status: str, error: str = "") -> bytes:
    """The bytes of one answer line."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    frame: dict[str, str] = {"msgId": msg_id, "status": status}
    if error:
        frame["error"] = error
    return _compact(frame).encode() + b"\n"


def ok_line(msg_id: str) -> bytes:
    """The exact bytes :func:`answer` writes for ``ok``: a reader compares a line with it before
    parsing any JSON (the common answer, as the reference child writes it)."""
    if msg_id.isascii() and msg_id.isalnum():  # a uuid hex, as minted: JSON quotes it as is
        return b'{"msgId":"' + msg_id.encode() + b'","status":"ok"}\n'
    return b'{"msgId":' + json.dumps(msg_id).encode() + b',"status":"ok"}\n'


def parse_answer(line: bytes) -> Answer:
    try:
        frame = json.loads(line)
    except ValueError as exc:
        raise FrameError(f"not a JSON answer line: {line[:200]!r}") from exc
    if not isinstance(frame, dict):
        raise FrameError(f"not a JSON object: {line[:200]!r}")
    msg_id, status, error = frame.get("msgId"), frame.get("status"), frame.get("error", "")
    if not isinstance(msg_id, str) or status not in STATUSES or not isinstance(error, str):
        raise FrameError(f"not an answer frame: {line[:200]!r}")
    return Answer(msg_id, status, error)


def read_brief(stream: BinaryIO) -> Brief | None:
    """The next request frame from ``stream``; None at a clean end of input (between frames)."""
    line = stream.readline(MAX_HEADER_BYTES)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise FrameError("header line too long or cut short")
    try:
        header = json.loads(line)
        length = header["length"]
        fields = [header[k] for k in ("msgId", "from", "to", "kind")]
    except (ValueError, KeyError, TypeError) as exc:
        raise FrameError(f"not a request header: {line[:200]!r}") from exc
    if not isinstance(length, int) or length < 0 or not all(isinstance(f, str) for f in fields):
        raise FrameError(f"not a request header: {line[:200]!r}")
    body = stream.read(length)
    if len(body) != length:
        raise FrameError(f"body cut short: {len(body)} of {length} bytes")
    msg_id, sender, to, kind = fields
    return Brief(msg_id=msg_id, sender=sender, to=to, kind=kind, body=body)
