"""The envelope value object (R-ENV-1): header fields plus an opaque body."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.errors import EnvelopeError
from pipeline.support import clock

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
    MALFORMED_HEADERS,
    VERSION,
    Kind,
)

_MAX_MS = 10**16 - 1  # the wire form allows at most 16 decimal digits


def new_id() -> str:
    """A random UUID's 32 hex digits, as ``uuid.uuid4().hex`` (a minted ``traceId``: a W3C trace
    id must be random), without building a ``UUID`` object, or an int, for each."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40  # the version-4 and variant bits (RFC 9562), as uuid4() sets them
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


_MS_BITS = (1 << 48) - 1  # a version-7 UUID's time field: unix milliseconds, 48 bits


def new_msg_id(now_ms: int) -> str:
    """A version-7 UUID's 32 hex digits (RFC 9562): ``now_ms`` in its first 48 bits, 74 random
    bits after. Ids minted later sort later (to the millisecond), so the indexes keyed by msgId
    (the dedupe claim, the held row, the inject journal, the forward-send tracking row) take each
    new row at their right edge: a random id lands in a random leaf page, which a store holding
    days of rows must read and write back once per row (docs/store.md, "Time-ordered msgIds")."""
    b = bytearray((now_ms & _MS_BITS).to_bytes(6, "big") + os.urandom(10))
    b[6] = b[6] & 0x0F | 0x70  # the version-7 and variant bits
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


def _new_ids(now_ms: int) -> tuple[str, str]:
    """A :func:`new_msg_id` and a :func:`new_id` from one ``getrandom`` call (a send mints msgId
    and traceId)."""
    b = bytearray((now_ms & _MS_BITS).to_bytes(6, "big") + os.urandom(26))
    b[6] = b[6] & 0x0F | 0x70
    b[8] = b[8] & 0x3F | 0x80
    b[22] = b[22] & 0x0F | 0x40
    b[24] = b[24] & 0x3F | 0x80
    both = b.hex()
    return both[:32], both[32:]


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """One message. ``sender`` travels as header ``from``; ``ts``/``expiresAt`` on every kind
    (R-ENV-5: expiry is gateway-enforced and also bounds replay)."""

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

    def __post_init__(self) -> None:
        # catch a sender's bug here, not as MALFORMED_HEADERS on another host
        ids = {"msg_id": self.msg_id, "trace_id": self.trace_id, "sender": self.sender,
               "to": self.to, "turn_id": self.turn_id, "spawn_id": self.spawn_id}  # fmt: skip
        for name, value in ids.items():
            if value is not None and (not isinstance(value, str) or not value):
                raise EnvelopeError(f"{name} must be a non-empty str", reason=MALFORMED_HEADERS)
        if not isinstance(self.kind, Kind) or self.v != VERSION:
            raise EnvelopeError(f"bad kind {self.kind!r} or v {self.v}", reason=MALFORMED_HEADERS)
        if not 0 <= self.ts_ms <= _MAX_MS or not 0 <= self.expires_at_ms <= _MAX_MS:
            raise EnvelopeError("ts/expiresAt out of range", reason=MALFORMED_HEADERS)

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
        """Mint ``msgId`` (a version-7 UUID's hex: time-ordered, :func:`new_msg_id`) and
        ``traceId`` (a version-4 UUID's hex) when not given; ``expiresAt = ts + ttl``."""
        ts = clock.now_ms() if now_ms is None else now_ms
        if not msg_id and not trace_id:
            msg_id, trace_id = _new_ids(ts)
        return cls(
            kind=kind if type(kind) is Kind else Kind(kind),
            msg_id=msg_id or new_msg_id(ts),
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


_new = object.__new__
_set = object.__setattr__


def parsed_envelope(
    kind: Kind,
    msg_id: str,
    trace_id: str,
    sender: str,
    to: str,
    ts_ms: int,
    expires_at_ms: int,
    body: bytes,
    turn_id: str | None,
    spawn_id: str | None,
) -> Envelope:
    """An :class:`Envelope` from fields the verifier's parse already checked as
    ``__post_init__`` would (non-empty ids, a known kind, at most 16 decimal digits), without
    checking them again: it runs once per record received."""
    env = _new(Envelope)
    _set(env, "kind", kind)
    _set(env, "msg_id", msg_id)
    _set(env, "trace_id", trace_id)
    _set(env, "sender", sender)
    _set(env, "to", to)
    _set(env, "ts_ms", ts_ms)
    _set(env, "expires_at_ms", expires_at_ms)
    _set(env, "body", body)
    _set(env, "turn_id", turn_id)
    _set(env, "spawn_id", spawn_id)
    _set(env, "v", VERSION)
    return env
