"""Encode = serialize -> sign. The inverse (verify -> deserialize) is :mod:`.verify` + :mod:`.body`.

R-ENV-1: fields travel as record headers, the body stays opaque bytes, and ``sig`` is the
publishing gateway's Ed25519 signature over :func:`canonical_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import EnvelopeError
from pipeline.record import Headers

from .body import codec_for
from .canonical import canonical_bytes
from .headers import RawHeaders
from .keys import Signer
from .model import Envelope
from .pairwise import Pair, mac
from .reasons import COVERED, H_KEY_ID, H_MAC, H_SIG
from .verify import Verified, Verifier


def sign_fields(fields: Mapping[str, bytes], *, topic: str, body: bytes, signer: Signer) -> Headers:
    """Sign raw covered header values (``keyId`` is added from the signer) and return the headers
    in canonical order, ``sig`` last. Low level: :func:`encode` is the normal entry point; tests
    use this to sign deliberately odd values (unknown kinds, non-UTF-8 ids)."""
    covered = {**fields, H_KEY_ID: signer.key_id.encode("ascii")}
    sig = signer.sign(canonical_bytes(covered, topic=topic, body=body))
    headers: Headers = [(name, covered[name]) for name in COVERED if name in covered]
    headers.append((H_SIG, sig))
    return headers


def seal_fields(fields: Mapping[str, bytes], *, topic: str, body: bytes, pair: Pair) -> Headers:
    """The pairwise mode's :func:`sign_fields`: ``keyId`` names the pair (sender / recipient
    agreement key ids) and ``mac`` = HMAC-SHA256 over the same canonical bytes, in place of
    ``sig`` (docs/envelope.md, "The pairwise MAC mode")."""
    covered = {**fields, H_KEY_ID: pair.outbound_key_id.encode("utf-8")}
    tag = mac(pair.key, canonical_bytes(covered, topic=topic, body=body))
    headers: Headers = [(name, covered[name]) for name in COVERED if name in covered]
    headers.append((H_MAC, tag))
    return headers


def encode(
    envelope: Envelope, *, topic: str, signer: Signer, pair: Pair | None = None
) -> tuple[bytes, list[tuple[str, bytes]], bytes]:
    """Return ``(record key, headers, value)``: key = ``to`` (UTF-8), value = the body bytes.
    With ``pair`` the record is MAC'd for that pair's host instead of signed."""
    fields, body = envelope.header_fields(), envelope.body
    if pair is not None:
        headers = seal_fields(fields, topic=topic, body=body, pair=pair)
        return envelope.to.encode("utf-8"), headers, body
    headers = sign_fields(fields, topic=topic, body=body, signer=signer)
    return envelope.to.encode("utf-8"), headers, envelope.body


@dataclass(frozen=True, slots=True)
class Decoded:
    """A verified envelope and its deserialized body (bytes, or a dict for Avro kinds)."""

    verified: Verified
    body: Any


def decode(
    verifier: Verifier,
    *,
    topic: str,
    key: bytes | None,
    headers: RawHeaders | None,
    value: bytes | None,
) -> Decoded:
    """Decode = verify -> deserialize. Raises ``EnvelopeError`` (reason, raw record kept) from
    either stage; the body codec is chosen by the signed kind only."""
    verified = verifier.verify(topic=topic, key=key, headers=headers, value=value)
    env = verified.envelope
    try:
        body = codec_for(env.kind).deserialize(env.body, env.kind)
    except EnvelopeError as exc:
        raw = {"topic": topic, "key": key, "headers": headers, "value": value}
        raise EnvelopeError(
            str(exc).removeprefix(f"[{exc.reason}] "),
            reason=exc.reason,
            raw=raw,
            context={"msg_id": env.msg_id, "from": env.sender, "to": env.to},
        ) from exc
    return Decoded(verified=verified, body=body)
