"""Verification reason codes and envelope header names: public API, never renamed.

Dashboards, alert rules and the dead-letter queue key on these strings (seed 000 §2.1: "any
check fails -> dead-letter, loud log, never a wedge"), so each one means exactly one thing.
"""

from __future__ import annotations

import enum

# -- reason codes, in the order the verifier can produce them ------------------------------
TOO_LARGE = "TOO_LARGE"  # header count, header bytes or body bytes over a bound (pre-crypto)
NOT_SIGNED = "NOT_SIGNED"  # no headers at all, or no ``sig`` header
MALFORMED_HEADERS = "MALFORMED_HEADERS"  # missing/duplicate/look-alike/ill-formed header values
UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"  # ``v`` is not a canonical form this reader knows
UNKNOWN_KEY = "UNKNOWN_KEY"  # ``keyId`` not in the trust store
SIG_INVALID = "SIG_INVALID"  # Ed25519 signature does not verify over the canonical bytes
UNKNOWN_KIND = "UNKNOWN_KIND"  # signed, but ``kind`` is not one of :class:`Kind`
UNKNOWN_SENDER = "UNKNOWN_SENDER"  # no live signed presence for ``from``
SIGNER_MISMATCH = "SIGNER_MISMATCH"  # ``from`` lives on another host than the signer
TO_MISMATCH = "TO_MISMATCH"  # ``to`` != record key, or the topic is not this host's inbox
EXPIRED = "EXPIRED"  # now > expiresAt + skew
CLOCK_SKEW = "CLOCK_SKEW"  # ts is further in the future than the allowed skew
TTL_TOO_LONG = "TTL_TOO_LONG"  # expiresAt - ts > max TTL (or expiresAt < ts)
REPLAY = "REPLAY"  # msgId already in the seen-set
SCHEMA_INVALID = "SCHEMA_INVALID"  # the Avro body of a structured kind does not decode

ALL_REASONS = (
    TOO_LARGE,
    NOT_SIGNED,
    MALFORMED_HEADERS,
    UNSUPPORTED_VERSION,
    UNKNOWN_KEY,
    SIG_INVALID,
    UNKNOWN_KIND,
    UNKNOWN_SENDER,
    SIGNER_MISMATCH,
    TO_MISMATCH,
    EXPIRED,
    CLOCK_SKEW,
    TTL_TOO_LONG,
    REPLAY,
    SCHEMA_INVALID,
)


class Kind(enum.StrEnum):
    """Envelope kinds (seed 000 §2.1). The wire value is the member name in ASCII."""

    SEND = "SEND"
    REPLY = "REPLY"
    ASK = "ASK"
    ANSWER = "ANSWER"
    TOO_LATE = "TOO_LATE"
    NO_WAITER = "NO_WAITER"
    ABANDONED = "ABANDONED"
    FAILED = "FAILED"
    INJECTED = "INJECTED"
    BROADCAST = "BROADCAST"
    PRESENCE = "PRESENCE"
    SPAWN = "SPAWN"


# -- header names ---------------------------------------------------------------------------
H_V = "v"
H_KIND = "kind"
H_MSG_ID = "msgId"
H_TRACE_ID = "traceId"
H_FROM = "from"
H_TO = "to"
H_TURN_ID = "turnId"
H_SPAWN_ID = "spawnId"
H_TS = "ts"
H_EXPIRES_AT = "expiresAt"
H_KEY_ID = "keyId"
H_SIG = "sig"

# The covered headers, in canonical order. The order is part of the v1 wire format.
COVERED: tuple[str, ...] = (
    H_V,
    H_KIND,
    H_MSG_ID,
    H_TRACE_ID,
    H_FROM,
    H_TO,
    H_TURN_ID,
    H_SPAWN_ID,
    H_TS,
    H_EXPIRES_AT,
    H_KEY_ID,
)
OPTIONAL: frozenset[str] = frozenset({H_TURN_ID, H_SPAWN_ID})
REQUIRED: tuple[str, ...] = tuple(h for h in COVERED if h not in OPTIONAL)
RESERVED: frozenset[str] = frozenset((*COVERED, H_SIG))
RESERVED_FOLDED: dict[str, str] = {h.casefold(): h for h in RESERVED}

VERSION = 1
BROADCAST_PREFIX = "broadcast."
GATEWAY_SUFFIX = "._gateway"
