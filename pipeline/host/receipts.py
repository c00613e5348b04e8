"""The gateway's own receipts: INJECTED and FAILED bodies (Avro, ``schemas/``), and the one
builder of the ``FAILED`` envelope, used by every source of a FAILED."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import schemas
from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipt_ids import failed_msg_id
from pipeline.errors import EnvelopeError
from pipeline.reasons import Verification
from pipeline.support.clock import now_ms


@dataclass(frozen=True, slots=True)
class Receipt:
    msg_id: str  # the msgId the receipt is about
    recipient: str
    reason: str = ""
    error: str = ""
    stage: str = ""


def injected_body(msg_id: str, recipient: str, *, stage: str = "") -> bytes:
    """``stage`` empty: ``msg_id`` was injected into ``recipient``; ``spawn``/``stop``: the
    SPAWN/STOP ``msg_id`` was carried out for the worker ``recipient``."""
    return schemas.encode(
        "injected",
        {
            "msg_id": msg_id,
            "recipient": recipient,
            "injected_at_ms": now_ms(),
            "stage": stage,
        },
    )


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
    The msgId is :func:`~pipeline.envelope.receipt_ids.failed_msg_id` of ``about`` -- the same on
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
