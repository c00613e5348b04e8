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

from .reasons import COVERED

DOMAIN_TAG = b"fleet-pipeline/envelope/v1\x00"
_ABSENT = b"\x00"
_PRESENT = b"\x01"
MAX_FIELD = 0xFFFFFFFF
_PRESENT_LEN = struct.Struct(">BI").pack  # 0x01 then the u32be length, in one call


def _lp(data: bytes) -> bytes:
    if len(data) > MAX_FIELD:  # pragma: no cover - bounded long before this by the verifier
        raise ValueError("field longer than 2**32-1 bytes")
    return len(data).to_bytes(4, "big") + data


def canonical_bytes(fields: Mapping[str, bytes | None], *, topic: str, body: bytes) -> bytes:
    """Build the bytes to sign/verify from raw covered header values, the topic and the body.
    Runs once per record on the verify hot path: one ``pack`` per present field."""
    parts: list[bytes] = [DOMAIN_TAG]
    append = parts.append
    get = fields.get
    for name in COVERED:
        value = get(name)
        if value is None:
            append(_ABSENT)
        else:
            size = len(value)
            if size > MAX_FIELD:  # pragma: no cover - bounded long before this by the verifier
                raise ValueError("field longer than 2**32-1 bytes")
            append(_PRESENT_LEN(1, size))
            append(value)
    append(_lp(topic.encode("utf-8")))
    append(_lp(body))
    return b"".join(parts)
