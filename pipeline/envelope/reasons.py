"""Verification reason codes and envelope header names: public API, never renamed.

Dashboards, alert rules and the dead-letter queue key on these strings (R-ENV-4: "any
check fails -> dead-letter, loud log, never a wedge"), so each one means exactly one thing.
"""

from __future__ import annotations

import enum

from pipeline.reasons import Verification

# -- reason codes: the ``Verification`` family of the registry (``pipeline.reasons``) --------
TOO_LARGE = Verification.TOO_LARGE
NOT_SIGNED = Verification.NOT_SIGNED
MALFORMED_HEADERS = Verification.MALFORMED_HEADERS
UNSUPPORTED_VERSION = Verification.UNSUPPORTED_VERSION
UNKNOWN_KEY = Verification.UNKNOWN_KEY
SIG_INVALID = Verification.SIG_INVALID
UNKNOWN_PAIR = Verification.UNKNOWN_PAIR
MAC_INVALID = Verification.MAC_INVALID
MAC_NOT_ALLOWED = Verification.MAC_NOT_ALLOWED
UNKNOWN_KIND = Verification.UNKNOWN_KIND
UNKNOWN_SENDER = Verification.UNKNOWN_SENDER
SIGNER_MISMATCH = Verification.SIGNER_MISMATCH
TO_MISMATCH = Verification.TO_MISMATCH
EXPIRED = Verification.EXPIRED
CLOCK_SKEW = Verification.CLOCK_SKEW
TTL_TOO_LONG = Verification.TTL_TOO_LONG
REPLAY = Verification.REPLAY
SCHEMA_INVALID = Verification.SCHEMA_INVALID

# in the order the verifier can produce them
ALL_REASONS: tuple[str, ...] = tuple(Verification)


class Kind(enum.StrEnum):
    """Envelope kinds (R-ENV-1). The wire value is the member name in ASCII."""

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
    STOP = "STOP"
    # the INJECTEDs of one inject burst for one sender in one record (docs/envelope.md, "RECEIPTS")
    RECEIPTS = "RECEIPTS"


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
H_MAC = "mac"  # the pairwise mode's tag, in place of ``sig`` (docs/envelope.md)

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
RESERVED: frozenset[str] = frozenset((*COVERED, H_SIG, H_MAC))
RESERVED_FOLDED: dict[str, str] = {h.casefold(): h for h in RESERVED}

VERSION = 1
BROADCAST_PREFIX = "broadcast."
GATEWAY_SUFFIX = "._gateway"
# Kinds only a gateway sends (``from`` = ``<host>._gateway``): a receipt settles its sender's
# tracked send, so one from an agent would let it settle another's (docs/envelope.md)
GATEWAY_KINDS: frozenset[Kind] = frozenset({Kind.INJECTED, Kind.FAILED, Kind.RECEIPTS})
