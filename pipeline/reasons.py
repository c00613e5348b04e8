"""Every reason code, in one registry: a ``StrEnum`` per family.

Reason codes are public API: dashboards, alert rules, runbooks and the dead-letter context key
on them, so a value never changes meaning once released. Each member's value is its name, so a
member IS the string (``Verification.SIG_INVALID == "SIG_INVALID"``) and can be used wherever a
plain reason string was used before.

Everything derived from the families lives here too, so nothing is hand-typed twice:

* :data:`AUTHENTICITY` -- the verification failures raised before the sender is established
  (the verifier's order is the enum's order: everything up to ``SIGNER_MISMATCH``). Such a dead
  letter's ``from`` may be forged, so it is never ``verified`` and never answered with ``FAILED``.
* :data:`PERMANENT` -- retrying cannot help: every verification failure plus the permanent
  handler/delivery codes.
* :data:`DEAD_LETTER_REASONS` -- what a dead letter produced by this package may carry; the
  label set of ``fleet_dead_letters_total`` (anything else is counted as ``OTHER``).

``tests/unit/test_reasons_docs.py`` parses the reason tables in ``docs/*.md``: a table marked
``<!-- reasons: <Family> -->`` must list exactly that family, and every code in any reason table
must be in this registry.
"""

from __future__ import annotations

import enum

OTHER = "OTHER"  # the metric label for a code outside a closed set (keeps label sets bounded)


class Verification(enum.StrEnum):
    """Why the receiving gateway refused a record (seed 000 §2.1), in the verifier's order."""

    TOO_LARGE = "TOO_LARGE"  # header count, header bytes or body bytes over a bound (pre-crypto)
    NOT_SIGNED = "NOT_SIGNED"  # no headers at all, or no ``sig`` header
    MALFORMED_HEADERS = "MALFORMED_HEADERS"  # missing/duplicate/look-alike/ill-formed headers
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"  # ``v`` is not a canonical form this reader knows
    UNKNOWN_KEY = "UNKNOWN_KEY"  # ``keyId`` not in the trust store
    SIG_INVALID = "SIG_INVALID"  # Ed25519 signature does not verify over the canonical bytes
    UNKNOWN_KIND = "UNKNOWN_KIND"  # signed, but ``kind`` is not a known kind
    UNKNOWN_SENDER = "UNKNOWN_SENDER"  # no live signed presence for ``from``
    SIGNER_MISMATCH = "SIGNER_MISMATCH"  # ``from`` lives on another host than the signer
    TO_MISMATCH = "TO_MISMATCH"  # ``to`` != record key, or the topic is not this host's inbox
    EXPIRED = "EXPIRED"  # now > expiresAt + skew (also: swept from the held store)
    CLOCK_SKEW = "CLOCK_SKEW"  # ts is further in the future than the allowed skew
    TTL_TOO_LONG = "TTL_TOO_LONG"  # expiresAt - ts > max TTL (or expiresAt < ts)
    REPLAY = "REPLAY"  # msgId already in the seen-set
    SCHEMA_INVALID = "SCHEMA_INVALID"  # the Avro body of a structured kind does not decode


class Delivery(enum.StrEnum):
    """Why a message could not be routed or held (at send time, or at the receiving gateway)."""

    DELIVERY_FAILED = "DELIVERY_FAILED"  # generic: a send could not be routed or confirmed
    UNKNOWN_RECIPIENT = "UNKNOWN_RECIPIENT"  # ``to`` is no known (or no local) entity
    NOT_LOCAL_SENDER = "NOT_LOCAL_SENDER"  # ``from`` is not an entity of this gateway
    NO_GROUP_MEMBERS = "NO_GROUP_MEMBERS"  # a broadcast group has no live member
    HELD_CAP_EXCEEDED = "HELD_CAP_EXCEEDED"  # the recipient already holds its cap of messages
    NO_INJECTOR = "NO_INJECTOR"  # an inject recipient without an injector


class Inject(enum.StrEnum):
    """Why a local inject (forward path) did not land; only ``TARGET_BUSY`` is retriable."""

    TARGET_BUSY = "TARGET_BUSY"  # nothing was sent
    INJECT_FAILED = "INJECT_FAILED"  # target missing, command failed, callback raised
    INJECT_TIMEOUT = "INJECT_TIMEOUT"  # gave up waiting; the target may hold part of it
    INJECT_BODY_INVALID = "INJECT_BODY_INVALID"  # the body cannot be delivered as-is


class Failure(enum.StrEnum):
    """Consumer-side failure handling: retries, dead letters, quarantine, offsets."""

    RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"  # a transient failure outlived the retry budget
    HANDLER_ERROR = "HANDLER_ERROR"  # generic handler failure
    HANDLER_REJECTED = "HANDLER_REJECTED"  # the handler refused the record for good
    VALIDATION_FAILED = "VALIDATION_FAILED"  # the record's content is invalid for the handler
    DLQ_WRITE_FAILED = "DLQ_WRITE_FAILED"  # the broker did not confirm a dead letter
    FENCED = "FENCED"  # another member with our static id took over: stop
    OFFSETS_LOST = "OFFSETS_LOST"  # the committed offset fell off retention: never skip
    RELEASE_FAILED = "RELEASE_FAILED"  # a replayed record of a quarantined key failed again
    RELEASE_TIMEOUT = "RELEASE_TIMEOUT"  # no owner of the key's partition executed the release
    NOT_QUARANTINED = "NOT_QUARANTINED"  # release of a key that is not quarantined
    AMBIGUOUS_SCOPE = "AMBIGUOUS_SCOPE"  # the key is quarantined in more than one scope
    NOT_FOUND = "NOT_FOUND"  # no dead letter at the given position


class Platform(enum.StrEnum):
    """The error tree's generic codes (``pipeline.errors``)."""

    FLEET_ERROR = "FLEET_ERROR"
    TOPOLOGY_MISMATCH = "TOPOLOGY_MISMATCH"
    BROKER_ERROR = "BROKER_ERROR"
    STORE_ERROR = "STORE_ERROR"


class Config(enum.StrEnum):
    """A bad configuration file or CLI input (``docs/configuration.md``); never retriable."""

    CONFIG_NOT_FOUND = "CONFIG_NOT_FOUND"
    CONFIG_SYNTAX = "CONFIG_SYNTAX"
    CONFIG_UNKNOWN_KEY = "CONFIG_UNKNOWN_KEY"
    CONFIG_MISSING_KEY = "CONFIG_MISSING_KEY"
    CONFIG_INVALID = "CONFIG_INVALID"
    CONFIG_DUPLICATE_GID = "CONFIG_DUPLICATE_GID"
    CONFIG_MISSING_INJECTOR = "CONFIG_MISSING_INJECTOR"
    CONFIG_UNKNOWN_CALLBACK = "CONFIG_UNKNOWN_CALLBACK"
    INVALID_NAME = "INVALID_NAME"


class Keys(enum.StrEnum):
    """Signing keys and the trust store (``fleet keys``)."""

    KEY_FILE_INVALID = "KEY_FILE_INVALID"
    KEY_INVALID = "KEY_INVALID"
    KEY_CLASH = "KEY_CLASH"
    KEY_EXISTS = "KEY_EXISTS"
    KEY_UNKNOWN = "KEY_UNKNOWN"


class Launcher(enum.StrEnum):
    """The local KRaft broker could not be set up or started (``docs/local-kafka.md``)."""

    LAUNCHER_FAILED = "LAUNCHER_FAILED"
    JAVA_NOT_FOUND = "JAVA_NOT_FOUND"
    ARTIFACT_UNRESOLVED = "ARTIFACT_UNRESOLVED"
    PORT_IN_USE = "PORT_IN_USE"
    BROKER_NOT_READY = "BROKER_NOT_READY"


class Security(enum.StrEnum):
    """A secured cluster refused us, or the ``[kafka]`` table is unsafe (``docs/security.md``)."""

    AUTH_FAILED = "AUTH_FAILED"  # SASL login refused (wrong password, unknown user, mechanism)
    TLS_FAILED = "TLS_FAILED"  # TLS handshake failed (unknown CA, bad certificate, hostname)
    PROTOCOL_MISMATCH = "PROTOCOL_MISMATCH"  # e.g. a plaintext client on a TLS/SASL listener
    NOT_AUTHORIZED = "NOT_AUTHORIZED"  # an ACL denies this operation on this resource
    SECRET_INLINE = "SECRET_INLINE"  # a password written into the file: refused
    SECRET_UNREADABLE = "SECRET_UNREADABLE"  # sasl_password_file / _env missing or empty
    PROPERTY_OWNED = "PROPERTY_OWNED"  # [kafka.properties] sets a key fleet-pipeline owns


FAMILIES: dict[str, type[enum.StrEnum]] = {
    f.__name__: f
    for f in (Verification, Delivery, Inject, Failure, Platform, Config, Keys, Launcher, Security)
}

_order = list(Verification)
AUTHENTICITY: frozenset[str] = frozenset(_order[: _order.index(Verification.SIGNER_MISMATCH) + 1])

PERMANENT: frozenset[str] = frozenset(Verification) | {
    Delivery.UNKNOWN_RECIPIENT,
    Config.CONFIG_INVALID,
    Config.INVALID_NAME,
    Failure.VALIDATION_FAILED,
    Failure.HANDLER_REJECTED,
}

DEAD_LETTER_REASONS: frozenset[str] = PERMANENT | {
    Delivery.HELD_CAP_EXCEEDED,
    Failure.RETRIES_EXHAUSTED,
    Failure.HANDLER_ERROR,
}


def known(code: str) -> bool:
    """True when ``code`` is a member of some family."""
    return any(code in family.__members__ for family in FAMILIES.values())


def label(code: str, allowed: frozenset[str] | set[str]) -> str:
    """A metric label from a closed set: ``code`` itself when allowed, else ``OTHER``."""
    return code if code in allowed else OTHER
