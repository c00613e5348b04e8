"""The gateway's answers about another message: their msgIds, their bodies (Avro, ``schemas/``)
and the one builder of the ``FAILED`` envelope, used by every source of a FAILED.

An answer's msgId is derived from the msgId it is about, never minted, so every source of the
same answer writes the same message. For ``FAILED`` that is what makes "exactly one FAILED per
send" (R-ACK-5, R-DLQ-4) hold across sources: the sender's deadline tracker, the DLQ reporter
(plain or signed), the relay's terminal sink, a failed inject and the control plane's answer
all use :func:`failed_msg_id` (and :func:`failed_body`), so the sender's dedupe, its tracking
row and its unique held row keep the first and drop the rest; and a re-emit after a crash is the
same message to the receiver. Here, at the envelope layer, because the DLQ reporter
(``pipeline.failures``) sits below the host and gateway packages that send the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import schemas
from pipeline.envelope.model import Envelope
from pipeline.envelope.reasons import Kind
from pipeline.errors import EnvelopeError
from pipeline.reasons import Verification
from pipeline.support.clock import now_ms


def failed_msg_id(original_msg_id: str) -> str:
    """The msgId of every ``FAILED`` about ``original_msg_id``, whichever source sends it."""
    return f"failed-{original_msg_id}"


def injected_msg_id(request_msg_id: str) -> str:
    """The msgId of the control plane's ``INJECTED`` answer to a SPAWN or STOP request."""
    return f"injected-{request_msg_id}"


def expired_msg_id(ask_msg_id: str) -> str:
    """The msgId of the turn-expiry notice about an unanswered ASK: a ``FAILED`` in kind, but
    its own message, not ``failed-<ask>``: what failed is the answer that never came, not the
    ASK's delivery."""
    return f"expired-{ask_msg_id}"


@dataclass(frozen=True, slots=True)
class Receipt:
    msg_id: str  # the msgId the receipt is about
    recipient: str
    reason: str = ""
    error: str = ""
    stage: str = ""


def injected_body(msg_id: str, recipient: str, *, stage: str = "") -> bytes:
    """``stage`` empty: ``msg_id`` was injected into ``recipient``; ``spawn``/``stop``: the
    SPAWN/STOP ``msg_id`` was carried out for the worker ``recipient``.

    One per injected brief, so written by hand: the same bytes as ``schemas.encode("injected",
    ...)`` (held by a test) without its per-call schema lookup and writer. A newer ``injected``
    schema than the one written here goes through :func:`pipeline.schemas.encode`."""
    at_ms = now_ms()
    head = _prefix("injected")
    if head is None:
        record = {"msg_id": msg_id, "recipient": recipient, "injected_at_ms": at_ms, "stage": stage}
        return schemas.encode("injected", record)
    return head + _avro_str(msg_id) + _avro_str(recipient) + _avro_long(at_ms) + _avro_str(stage)


# the fields the hand-written bodies write, nested records' by their field's name
_WRITTEN: dict[str, tuple[object, ...]] = {
    "injected": ("msg_id", "recipient", "injected_at_ms", "stage"),
    "receipts": (("items", ("msg_id", "trace_id", "body")),),
}
_prefixes: dict[tuple[str, schemas.Framing], bytes | None] = {}


def _shape(schema: dict[str, Any]) -> tuple[object, ...]:
    """A record schema's field names; an array of records as (name, its records' names)."""
    out: list[object] = []
    for f in schema["fields"]:
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "array" and isinstance(t["items"], dict):
            out.append((f["name"], tuple(g["name"] for g in t["items"]["fields"])))
        else:
            out.append(f["name"])
    return tuple(out)


def _prefix(name: str) -> bytes | None:
    """The framing prefix of the newest ``name`` schema when its fields are the ones written
    here by hand (None: a newer schema, written by ``schemas.encode``)."""
    framing = schemas.writing()
    head = _prefixes.get((name, framing), b"")
    if head == b"":
        version, schema = schemas.latest(name)
        head = _prefixes[(name, framing)] = (
            schemas.prefix(version, framing) if _shape(schema) == _WRITTEN[name] else None
        )
    return head


def _avro_long(n: int) -> bytes:
    """Avro's ``long``: zig-zag, then 7 bits a byte, low bits first."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _avro_str(text: str) -> bytes:
    """Avro's ``string``: the UTF-8 length as a ``long``, then the bytes."""
    raw = text.encode()
    n = len(raw)
    return (bytes((n << 1,)) if n < 64 else _avro_long(n)) + raw


def receipts_envelope(items: Sequence[Envelope], *, sender: str, ttl_s: float) -> Envelope:
    """The ``INJECTED`` envelopes ``items`` (one recipient, at least one) as one ``RECEIPTS``
    envelope from ``sender`` (docs/envelope.md, "RECEIPTS"): each item keeps its msgId, its
    traceId and its body, so its reader holds what the single records would have held."""
    head = _prefix("receipts")
    if head is None:
        record = [{"msg_id": e.msg_id, "trace_id": e.trace_id, "body": e.body} for e in items]
        body = schemas.encode("receipts", {"items": record})
    else:  # written by hand, as injected_body: the bytes schemas.encode writes (held by a test)
        parts = [head, _avro_long(len(items))]
        for e in items:
            parts += (_avro_str(e.msg_id), _avro_str(e.trace_id), _avro_long(len(e.body)), e.body)
        parts.append(b"\x00")  # the array's end: a block of no item
        body = b"".join(parts)
    return Envelope.new(kind=Kind.RECEIPTS, sender=sender, to=items[0].to, body=body, ttl_s=ttl_s)


def read_receipts(env: Envelope) -> list[Envelope]:
    """A verified ``RECEIPTS`` envelope's items, each as the ``INJECTED`` it stands for: its own
    msgId, traceId and body, the batch's ``from``, ``to``, ``ts`` and ``expiresAt`` (all four
    signed with it). A bad body, no item or a malformed id is ``SCHEMA_INVALID``."""
    record = schemas.decode("receipts", env.body)
    try:
        items = [
            Envelope(
                kind=Kind.INJECTED,
                msg_id=str(item["msg_id"]),
                trace_id=str(item["trace_id"]),
                sender=env.sender,
                to=env.to,
                ts_ms=env.ts_ms,
                expires_at_ms=env.expires_at_ms,
                body=bytes(item["body"]),
            )
            for item in record["items"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise EnvelopeError(
            f"RECEIPTS item invalid: {exc}", reason=Verification.SCHEMA_INVALID
        ) from exc
    if not items:
        raise EnvelopeError("RECEIPTS without an item", reason=Verification.SCHEMA_INVALID)
    return items


def failed_body(msg_id: str, recipient: str, *, reason: str, error: str, stage: str) -> bytes:
    return schemas.encode(
        "failed",
        {
            "msg_id": msg_id,
            "recipient": recipient,
            "reason": reason,
            "error": error[:1024],
            "stage": stage,
            "failed_at_ms": now_ms(),
        },
    )


def failed_receipt(
    *,
    about: str,
    recipient: str,
    sender: str,
    to: str,
    reason: str,
    error: str,
    stage: str,
    ttl_s: float,
    trace_id: str | None,
    msg_id: str | None = None,
    turn_id: str | None = None,
) -> Envelope:
    """The ``FAILED`` telling ``to`` that the message ``about`` (meant for ``recipient``) failed.

    ``sender`` is the reporting gateway (``<host>._gateway``); ``trace_id`` is carried from the
    failed message (None mints one: the turn-expiry notice has no message to carry it from).
    The msgId is :func:`failed_msg_id` of ``about`` -- the same on
    every path, so the sender keeps exactly one (R-ACK-5, R-DLQ-4); ``msg_id`` is only for a notice
    that is its own message (``expired-<ask>``).
    """
    return Envelope.new(
        kind=Kind.FAILED,
        msg_id=msg_id or failed_msg_id(about),
        sender=sender,
        to=to,
        body=failed_body(about, recipient, reason=reason, error=error, stage=stage),
        ttl_s=ttl_s,
        trace_id=trace_id,
        turn_id=turn_id,
    )


def read_receipt(kind: str, body: bytes) -> Receipt:
    """Decode an INJECTED or FAILED body; a bad body is ``SCHEMA_INVALID`` (dead-lettered)."""
    record = schemas.decode("injected" if kind == "INJECTED" else "failed", body)
    try:
        return Receipt(
            msg_id=str(record["msg_id"]),
            recipient=str(record["recipient"]),
            reason=str(record.get("reason", "")),
            error=str(record.get("error", "")),
            stage=str(record.get("stage", "")),
        )
    except KeyError as exc:
        raise EnvelopeError(f"{kind} body lacks {exc}", reason=Verification.SCHEMA_INVALID) from exc
