"""The envelope value object (seed 000 §2.1): header fields plus an opaque body."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from .reasons import (
    H_EXPIRES_AT,
    H_FROM,
    H_KIND,
    H_MSG_ID,
    H_SPAWN_ID,
    H_TO,
    H_TRACE_ID,
    H_TS,
    H_TURN_ID,
    H_V,
    VERSION,
    Kind,
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """One message. ``sender`` travels as header ``from``; ``ts``/``expiresAt`` on every kind
    (seed 000 §2.1: expiry is gateway-enforced and also bounds replay)."""

    kind: Kind
    msg_id: str
    trace_id: str
    sender: str
    to: str
    ts_ms: int
    expires_at_ms: int
    body: bytes = b""
    turn_id: str | None = None
    spawn_id: str | None = None
    v: int = VERSION

    @classmethod
    def new(
        cls,
        *,
        kind: Kind,
        sender: str,
        to: str,
        body: bytes = b"",
        ttl_s: float,
        trace_id: str | None = None,
        turn_id: str | None = None,
        spawn_id: str | None = None,
        msg_id: str | None = None,
        now_ms: int | None = None,
    ) -> Envelope:
        """Mint ``msgId`` (uuid4 hex) and ``traceId`` when not given; ``expiresAt = ts + ttl``."""
        ts = _now() if now_ms is None else now_ms
        return cls(
            kind=Kind(kind),
            msg_id=msg_id or new_id(),
            trace_id=trace_id or new_id(),
            sender=sender,
            to=to,
            ts_ms=ts,
            expires_at_ms=ts + round(ttl_s * 1000),
            body=body,
            turn_id=turn_id,
            spawn_id=spawn_id,
        )

    def header_fields(self) -> dict[str, bytes]:
        """The covered header values (without ``keyId``) as they travel: UTF-8 / ASCII decimal."""
        fields = {
            H_V: str(self.v).encode("ascii"),
            H_KIND: self.kind.value.encode("ascii"),
            H_MSG_ID: self.msg_id.encode("utf-8"),
            H_TRACE_ID: self.trace_id.encode("utf-8"),
            H_FROM: self.sender.encode("utf-8"),
            H_TO: self.to.encode("utf-8"),
            H_TS: str(self.ts_ms).encode("ascii"),
            H_EXPIRES_AT: str(self.expires_at_ms).encode("ascii"),
        }
        if self.turn_id is not None:
            fields[H_TURN_ID] = self.turn_id.encode("utf-8")
        if self.spawn_id is not None:
            fields[H_SPAWN_ID] = self.spawn_id.encode("utf-8")
        return fields


_now = now_ms
