"""The v1 canonical byte string that ``sig`` covers (docs/envelope.md, "Canonical form").

Seed 000 §2.1: the signature covers the exact body bytes plus a canonical header subset, so no
JSON canonicalisation sits in the security path. The layout, byte for byte::

    DOMAIN_TAG                                   b"fleet-pipeline/envelope/v1\\x00" (27 bytes)
    for each covered header, in COVERED order:   0x00                  when absent
                                                 0x01 u32be(len) bytes when present
    u32be(len(topic)) topic (UTF-8)
    u32be(len(body))  body

Header values are taken exactly as they travel (raw bytes), never re-encoded.
"""

from __future__ import annotations

from collections.abc import Mapping

from .reasons import COVERED

DOMAIN_TAG = b"fleet-pipeline/envelope/v1\x00"
_ABSENT = b"\x00"
_PRESENT = b"\x01"
MAX_FIELD = 0xFFFFFFFF


def _lp(data: bytes) -> bytes:
    if len(data) > MAX_FIELD:  # pragma: no cover - bounded long before this by the verifier
        raise ValueError("field longer than 2**32-1 bytes")
    return len(data).to_bytes(4, "big") + data


def canonical_bytes(fields: Mapping[str, bytes | None], *, topic: str, body: bytes) -> bytes:
    """Build the bytes to sign/verify from raw covered header values, the topic and the body."""
    parts: list[bytes] = [DOMAIN_TAG]
    for name in COVERED:
        value = fields.get(name)
        if value is None:
            parts.append(_ABSENT)
        else:
            parts.append(_PRESENT)
            parts.append(_lp(value))
    parts.append(_lp(topic.encode("utf-8")))
    parts.append(_lp(body))
    return b"".join(parts)
