"""The v1 canonical byte string that ``sig`` covers (docs/envelope.md, "Canonical form").

R-ENV-2: the signature covers the exact body bytes plus a canonical header subset, so no
JSON canonicalisation sits in the security path. The layout, byte for byte::

    DOMAIN_TAG                                   b"fleet-pipeline/envelope/v1\\x00" (27 bytes)
    for each covered header, in COVERED order:   0x00                  when absent
                                                 0x01 u32be(len) bytes when present
    u32be(len(topic)) topic (UTF-8)
    u32be(len(body))  body

Header values are taken exactly as they travel (raw bytes), never re-encoded.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from .reasons import (
    COVERED,
    H_EXPIRES_AT,
    H_FROM,
    H_KEY_ID,
    H_KIND,
    H_MSG_ID,
    H_SPAWN_ID,
    H_TO,
    H_TRACE_ID,
    H_TS,
    H_TURN_ID,
    H_V,
)

DOMAIN_TAG = b"fleet-pipeline/envelope/v1\x00"
_ABSENT = b"\x00"
MAX_FIELD = 0xFFFFFFFF
_PRESENT_LEN = struct.Struct(">BI").pack  # 0x01 then the u32be length, in one call
_U32 = struct.Struct(">I").pack


def canonical_bytes(fields: Mapping[str, bytes | None], *, topic: str, body: bytes) -> bytes:
    """Build the bytes to sign/verify from raw covered header values, the topic and the body.
    Runs once per record on the sign and verify paths, so the layout is written out field by
    field (in ``COVERED`` order, held at import below) rather than looped over."""
    get = fields.get
    return canonical_values(
        get(H_V), get(H_KIND), get(H_MSG_ID), get(H_TRACE_ID), get(H_FROM), get(H_TO),
        get(H_TURN_ID), get(H_SPAWN_ID), get(H_TS), get(H_EXPIRES_AT), get(H_KEY_ID), topic, body,
    )  # fmt: skip


def canonical_values(
    v: bytes | None,
    kind: bytes | None,
    msg_id: bytes | None,
    trace_id: bytes | None,
    sender: bytes | None,
    to: bytes | None,
    turn_id: bytes | None,
    spawn_id: bytes | None,
    ts: bytes | None,
    expires_at: bytes | None,
    key_id: bytes | None,
    topic: str,
    body: bytes,
    /,
) -> bytes:
    """:func:`canonical_bytes` from the covered values in ``COVERED`` order (``None``: absent),
    then the topic and the body: for a signer that holds them one by one (the envelope's
    :func:`~.codec.encode`) rather than in a mapping. Positional only: one call per record."""
    name = topic.encode("utf-8")
    try:
        return b"".join(
            (
                DOMAIN_TAG,
                _ABSENT if v is None else _PRESENT_LEN(1, len(v)) + v,
                _ABSENT if kind is None else _PRESENT_LEN(1, len(kind)) + kind,
                _ABSENT if msg_id is None else _PRESENT_LEN(1, len(msg_id)) + msg_id,
                _ABSENT if trace_id is None else _PRESENT_LEN(1, len(trace_id)) + trace_id,
                _ABSENT if sender is None else _PRESENT_LEN(1, len(sender)) + sender,
                _ABSENT if to is None else _PRESENT_LEN(1, len(to)) + to,
                _ABSENT if turn_id is None else _PRESENT_LEN(1, len(turn_id)) + turn_id,
                _ABSENT if spawn_id is None else _PRESENT_LEN(1, len(spawn_id)) + spawn_id,
                _ABSENT if ts is None else _PRESENT_LEN(1, len(ts)) + ts,
                _ABSENT if expires_at is None else _PRESENT_LEN(1, len(expires_at)) + expires_at,
                _ABSENT if key_id is None else _PRESENT_LEN(1, len(key_id)) + key_id,
                _U32(len(name)),
                name,
                _U32(len(body)),
                body,
            )
        )
    except struct.error:  # pragma: no cover - bounded long before this by the verifier
        raise ValueError("field longer than 2**32-1 bytes") from None


# the layout above names the covered headers one by one: it is the v1 order, or this fails
assert COVERED == (
    H_V, H_KIND, H_MSG_ID, H_TRACE_ID, H_FROM, H_TO, H_TURN_ID, H_SPAWN_ID, H_TS, H_EXPIRES_AT,
    H_KEY_ID,
)  # fmt: skip
