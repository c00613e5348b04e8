"""Bodies of the gateway's own messages: INJECTED and FAILED (Avro, ``schemas/``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import schemas
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
