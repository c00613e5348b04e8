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
from .canonical import canonical_bytes, canonical_values
from .headers import RawHeaders
from .keys import Signer
from .model import Envelope
from .pairwise import Pair, mac
from .reasons import (
    COVERED,
    H_EXPIRES_AT,
    H_FROM,
    H_KEY_ID,
    H_KIND,
    H_MAC,
    H_MSG_ID,
    H_SIG,
    H_SPAWN_ID,
    H_TO,
    H_TRACE_ID,
    H_TS,
    H_TURN_ID,
    H_V,
)
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
    With ``pair`` the record is MAC'd for that pair's host instead of signed.

    Signed, it runs once per send: the covered values are encoded once each and both the
    canonical bytes and the headers are built from them, in ``COVERED`` order, without the
    mappings :func:`sign_fields` takes (the same bytes and headers, a unit test says so)."""
    body = envelope.body
    if pair is not None:
        sealed = seal_fields(envelope.header_fields(), topic=topic, body=body, pair=pair)
        return envelope.to.encode("utf-8"), sealed, body
    v = b"%d" % envelope.v
    kind = envelope.kind.value.encode("ascii")
    msg_id = envelope.msg_id.encode("utf-8")
    trace_id = envelope.trace_id.encode("utf-8")
    sender = envelope.sender.encode("utf-8")
    to = envelope.to.encode("utf-8")
    turn_id = None if envelope.turn_id is None else envelope.turn_id.encode("utf-8")
    spawn_id = None if envelope.spawn_id is None else envelope.spawn_id.encode("utf-8")
    ts = b"%d" % envelope.ts_ms
    expires_at = b"%d" % envelope.expires_at_ms
    key_id = signer.key_id.encode("ascii")
    sig = signer.sign(
        canonical_values(v, kind, msg_id, trace_id, sender, to, turn_id, spawn_id, ts,
                         expires_at, key_id, topic, body)
    )  # fmt: skip
    headers: Headers = [(H_V, v), (H_KIND, kind), (H_MSG_ID, msg_id), (H_TRACE_ID, trace_id),
                        (H_FROM, sender), (H_TO, to)]  # fmt: skip
    if turn_id is not None:
        headers.append((H_TURN_ID, turn_id))
    if spawn_id is not None:
        headers.append((H_SPAWN_ID, spawn_id))
    headers += ((H_TS, ts), (H_EXPIRES_AT, expires_at), (H_KEY_ID, key_id), (H_SIG, sig))
    return to, headers, body


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
