"""The signed envelope (R-ENV): kinds, codec, keys and verification.

encode = serialize (:mod:`.body`) -> sign (:func:`encode`);
decode = verify (:class:`Verifier`) -> deserialize (:func:`codec_for`).
"""

from .batch import BatchVerifier
from .body import AvroBody, BodyCodec, RawBody, codec_for
from .canonical import DOMAIN_TAG, canonical_bytes
from .codec import Decoded, decode, encode, seal_fields, sign_fields
from .keys import Signer, TrustedKey, TrustStore, key_id_for
from .model import Envelope
from .pairwise import AgreementKey, Pairing, PeerKey
from .reasons import (
    ALL_REASONS,
    CLOCK_SKEW,
    EXPIRED,
    GATEWAY_KINDS,
    MAC_INVALID,
    MAC_NOT_ALLOWED,
    MALFORMED_HEADERS,
    NOT_SIGNED,
    REPLAY,
    SCHEMA_INVALID,
    SIG_INVALID,
    SIGNER_MISMATCH,
    TO_MISMATCH,
    TOO_LARGE,
    TTL_TOO_LONG,
    UNKNOWN_KEY,
    UNKNOWN_KIND,
    UNKNOWN_PAIR,
    UNKNOWN_SENDER,
    UNSUPPORTED_VERSION,
    Kind,
)
from .seen import BoundedSeenSet, SeenSet
from .verify import PresenceView, Verified, Verifier

__all__ = [
    "ALL_REASONS",
    "CLOCK_SKEW",
    "DOMAIN_TAG",
    "EXPIRED",
    "GATEWAY_KINDS",
    "MAC_INVALID",
    "MAC_NOT_ALLOWED",
    "MALFORMED_HEADERS",
    "NOT_SIGNED",
    "REPLAY",
    "SCHEMA_INVALID",
    "SIGNER_MISMATCH",
    "SIG_INVALID",
    "TOO_LARGE",
    "TO_MISMATCH",
    "TTL_TOO_LONG",
    "UNKNOWN_KEY",
    "UNKNOWN_KIND",
    "UNKNOWN_PAIR",
    "UNKNOWN_SENDER",
    "UNSUPPORTED_VERSION",
    "AgreementKey",
    "AvroBody",
    "BatchVerifier",
    "BodyCodec",
    "BoundedSeenSet",
    "Decoded",
    "Envelope",
    "Kind",
    "Pairing",
    "PeerKey",
    "PresenceView",
    "RawBody",
    "SeenSet",
    "Signer",
    "TrustStore",
    "TrustedKey",
    "Verified",
    "Verifier",
    "canonical_bytes",
    "codec_for",
    "decode",
    "encode",
    "key_id_for",
    "seal_fields",
    "sign_fields",
]
