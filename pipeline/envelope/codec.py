"""Encode = serialize -> sign. The inverse (verify -> deserialize) is :mod:`.verify` + :mod:`.body`.

Seed 000 §2.1: fields travel as record headers, the body stays opaque bytes, and ``sig`` is the
publishing gateway's Ed25519 signature over :func:`canonical_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .canonical import canonical_bytes
from .keys import Signer
from .model import Envelope
from .reasons import COVERED, H_KEY_ID, H_SIG

Headers = list[tuple[str, bytes]]


def sign_fields(fields: Mapping[str, bytes], *, topic: str, body: bytes, signer: Signer) -> Headers:
    """Sign raw covered header values (``keyId`` is added from the signer) and return the headers
    in canonical order, ``sig`` last. Low level: :func:`encode` is the normal entry point; tests
    use this to sign deliberately odd values (unknown kinds, non-UTF-8 ids)."""
    covered = {**fields, H_KEY_ID: signer.key_id.encode("ascii")}
    sig = signer.sign(canonical_bytes(covered, topic=topic, body=body))
    headers: Headers = [(name, covered[name]) for name in COVERED if name in covered]
    headers.append((H_SIG, sig))
    return headers


def encode(
    envelope: Envelope, *, topic: str, signer: Signer
) -> tuple[bytes, list[tuple[str, bytes]], bytes]:
    """Return ``(record key, headers, value)``: key = ``to`` (UTF-8), value = the body bytes."""
    headers = sign_fields(envelope.header_fields(), topic=topic, body=envelope.body, signer=signer)
    return envelope.to.encode("utf-8"), headers, envelope.body
