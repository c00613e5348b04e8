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
    """Why the receiving gateway refused a record (R-ENV-3), in the verifier's order."""

    TOO_LARGE = "TOO_LARGE"  # header count, header bytes or body bytes over a bound (pre-crypto)
    NOT_SIGNED = "NOT_SIGNED"  # no headers at all, or no ``sig`` header
    MALFORMED_HEADERS = "MALFORMED_HEADERS"  # missing/duplicate/look-alike/ill-formed headers
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"  # ``v`` is not a canonical form this reader knows
    UNKNOWN_KEY = "UNKNOWN_KEY"  # ``keyId`` not in the trust store
    # a MAC'd record whose ``keyId`` names no pair this host can derive (no signed presence
    # published that agreement key, its voucher is untrusted, or it names another recipient)
    UNKNOWN_PAIR = "UNKNOWN_PAIR"
    SIG_INVALID = "SIG_INVALID"  # Ed25519 signature does not verify over the canonical bytes
    MAC_INVALID = "MAC_INVALID"  # the pairwise HMAC-SHA256 tag does not verify (or is not 32 B)
    UNKNOWN_KIND = "UNKNOWN_KIND"  # signed, but ``kind`` is not a known kind
    # a MAC'd record this host does not take MAC'd: the mode is off here, or its kind/topic
    # must be signed (presence, control, reports, broadcast)
    MAC_NOT_ALLOWED = "MAC_NOT_ALLOWED"
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
    # a brief reached its recipient's gateway after the inject deadline its sender signed
    # (``expiresAt``): refused, never injected -- the sender's FAILED stays true
    INJECT_DEADLINE_PASSED = "INJECT_DEADLINE_PASSED"


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
    UNKNOWN_REQUEST = "UNKNOWN_REQUEST"  # no release request with that id
    REPLAY_FAILED = "REPLAY_FAILED"  # a dead letter replayed to its source was not confirmed


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
    CONFIG_MISSING_TRUST = "CONFIG_MISSING_TRUST"  # no trust_dir: nothing could be verified
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
    NO_CLUSTER = "NO_CLUSTER"  # stop/status of a cluster directory that holds none
    CLUSTER_IN_USE = "CLUSTER_IN_USE"  # the cluster directory is owned by a live launcher
    MAVEN_NOT_FOUND = "MAVEN_NOT_FOUND"  # the broker's jars must be fetched, and mvn is missing
    STORAGE_FORMAT_FAILED = "STORAGE_FORMAT_FAILED"  # kafka-storage format exited non-zero


class Broker(enum.StrEnum):
    """A classified broker error (``pipeline.kafka.errors``): transient, fatal or permanent."""

    BROKER_UNAVAILABLE = "BROKER_UNAVAILABLE"  # transient: waited out
    BROKER_FATAL = "BROKER_FATAL"  # fencing, authentication, authorization, offsets lost
    BROKER_REJECTED = "BROKER_REJECTED"  # permanent for this request


class ProducePermanent(enum.StrEnum):
    """A produce error that sending the same record again cannot pass (``docs/outbox.md``).

    The relay makes it the row's terminal reason instead of retrying forever."""

    MSG_SIZE_TOO_LARGE = "MSG_SIZE_TOO_LARGE"
    INVALID_RECORD = "INVALID_RECORD"
    CORRUPT_MESSAGE = "CORRUPT_MESSAGE"
    RECORD_LIST_TOO_LARGE = "RECORD_LIST_TOO_LARGE"
    # the same code as Security.NOT_AUTHORIZED: an ACL denies WRITE on the row's topic (the row's
    # error names the topic and the operation, docs/security.md)
    NOT_AUTHORIZED = "NOT_AUTHORIZED"
    INVALID_TOPIC = "INVALID_TOPIC"
    UNSUPPORTED_FOR_MESSAGE_FORMAT = "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    INVALID_ARG = "INVALID_ARG"


class Outbox(enum.StrEnum):
    """The outbox's own refusals: at write time, and rows the relay cannot read."""

    TOO_LARGE = "TOO_LARGE"  # the record is above the topic's limit: nothing was written
    BRANCH_ABANDONED = "BRANCH_ABANDONED"  # a write to a branch that was abandoned
    OUTBOX_CORRUPT = "OUTBOX_CORRUPT"  # a stored headers blob does not decode


class Store(enum.StrEnum):
    """The store's schema check (``docs/store.md``); never retriable."""

    STORE_SCHEMA_OUTDATED = "STORE_SCHEMA_OUTDATED"  # run ``fleet store upgrade``
    STORE_SCHEMA_AHEAD = "STORE_SCHEMA_AHEAD"  # written by a newer release


class Idempotency(enum.StrEnum):
    """Why an idempotency-key operation was refused (R-EFF)."""

    # configuration time: a key store that forgets before the topic does lets a replay repeat
    IDEM_RETENTION_SHORTER_THAN_REPLAY = "IDEM_RETENTION_SHORTER_THAN_REPLAY"
    IDEM_UNKNOWN_KEY_CLASS = "IDEM_UNKNOWN_KEY_CLASS"
    IDEM_KEY_UNKNOWN = "IDEM_KEY_UNKNOWN"  # fleet idem show: no such key
    IDEM_KEY_INVALID = "IDEM_KEY_INVALID"  # empty, or longer than 255 characters
    IDEM_KEY_MISSING = "IDEM_KEY_MISSING"  # HTTP 400: a required Idempotency-Key is absent
    IDEM_IN_PROGRESS = "IDEM_IN_PROGRESS"  # HTTP 409: the first request with the key still runs
    IDEM_PAYLOAD_MISMATCH = "IDEM_PAYLOAD_MISMATCH"  # HTTP 422: same key, different payload
    IDEM_NOT_RESERVED = "IDEM_NOT_RESERVED"  # complete/fail on a key nobody holds in progress


class Saga(enum.StrEnum):
    """Why a saga step, decision or definition was refused (R-SAGA)."""

    SAGA_UNKNOWN = "SAGA_UNKNOWN"
    SAGA_NOT_IN_HUMAN_QUEUE = "SAGA_NOT_IN_HUMAN_QUEUE"
    SAGA_NOT_AWAITING = "SAGA_NOT_AWAITING"  # a decision for a saga not waiting for one
    SAGA_DEFINITION_INVALID = "SAGA_DEFINITION_INVALID"
    SAGA_COMPENSATION_EXHAUSTED = "SAGA_COMPENSATION_EXHAUSTED"
    SAGA_APPROVAL_EXPIRED = "SAGA_APPROVAL_EXPIRED"
    SAGA_APPROVAL_REJECTED = "SAGA_APPROVAL_REJECTED"
    SAGA_STEP_FAILED = "SAGA_STEP_FAILED"


class Lab(enum.StrEnum):
    """The lab's scenario loader and runner (``docs/lab.md``)."""

    LAB_SCENARIO_NOT_FOUND = "LAB_SCENARIO_NOT_FOUND"  # the file cannot be read
    LAB_SCENARIO_SYNTAX = "LAB_SCENARIO_SYNTAX"  # not TOML / not UTF-8
    LAB_UNKNOWN_KEY = "LAB_UNKNOWN_KEY"  # a key this version does not know
    LAB_MISSING_KEY = "LAB_MISSING_KEY"  # a required key is absent
    LAB_INVALID_VALUE = "LAB_INVALID_VALUE"  # wrong type or out of range
    LAB_RUN_FAILED = "LAB_RUN_FAILED"  # a run could not start or a process died unexpectedly
    LAB_PLOTS_UNAVAILABLE = "LAB_PLOTS_UNAVAILABLE"  # matplotlib missing: the ``lab`` extra


class Pool(enum.StrEnum):
    """``fleet pool run``'s own inputs (``docs/pools.md``)."""

    INVALID_HANDLER = "INVALID_HANDLER"  # --handler is not an importable callable
    INVALID_OPTION = "INVALID_OPTION"  # an option out of range, or options that exclude each other


class Runs(enum.StrEnum):
    """The run journal (``fleet run``)."""

    RUN_UNKNOWN = "RUN_UNKNOWN"  # no run with that id for the tenant


class Lifecycle(enum.StrEnum):
    """Spawn, stop and reap (``docs/lifecycle.md``; R-SPAWN, R-LIFE,
    R-FAIL-8). Dashboards and FAILED bodies key on them."""

    UNKNOWN_HOST = "UNKNOWN_HOST"  # requester: no live <host>._gateway entry
    SPAWN_TIMEOUT = "SPAWN_TIMEOUT"  # requester: no outcome within spawn_deadline_s
    UNKNOWN_PROFILE = "UNKNOWN_PROFILE"  # target: the host has no profile of that name
    CAP_EXCEEDED = "CAP_EXCEEDED"  # target: over a per-parent/per-job cap or the job budget
    LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE"  # target: job ledger unreachable; ask again later
    RECIPIENT_GONE = "RECIPIENT_GONE"  # target: mail for a stopped or reaped worker
    UNKNOWN_WORKER = "UNKNOWN_WORKER"  # target: STOP for a gid that is no worker spawned here
    LAUNCH_FAILED = "LAUNCH_FAILED"  # target: the launch command could not be started
    LAUNCH_INTERRUPTED = "LAUNCH_INTERRUPTED"  # target: stopped between admit and launch
    NOT_A_CONTROL_KIND = "NOT_A_CONTROL_KIND"  # target: a control record that is no SPAWN/STOP
    STOP_TIMEOUT = "STOP_TIMEOUT"  # requester: no outcome for a STOP within spawn_deadline_s
    NOT_PERMITTED = "NOT_PERMITTED"  # target: the requester may not stop this worker/spawn this


class Security(enum.StrEnum):
    """A secured cluster refused us, or the ``[kafka]`` table is unsafe (``docs/security.md``)."""

    AUTH_FAILED = "AUTH_FAILED"  # SASL login refused (wrong password, unknown user, mechanism)
    TLS_FAILED = "TLS_FAILED"  # TLS handshake failed (unknown CA, bad certificate, hostname)
    PROTOCOL_MISMATCH = "PROTOCOL_MISMATCH"  # e.g. a plaintext client on a TLS/SASL listener
    NOT_AUTHORIZED = "NOT_AUTHORIZED"  # an ACL denies this operation on this resource
    SECRET_INLINE = "SECRET_INLINE"  # a password written into the file: refused
    SECRET_UNREADABLE = "SECRET_UNREADABLE"  # sasl_password_file / _env missing or empty
    PROPERTY_OWNED = "PROPERTY_OWNED"  # [kafka.properties] sets a key fleet-pipeline owns
    PROPERTY_UNMAPPABLE = "PROPERTY_UNMAPPABLE"  # a Java client key librdkafka cannot honour


FAMILIES: dict[str, type[enum.StrEnum]] = {
    f.__name__: f
    for f in (
        Verification,
        Delivery,
        Inject,
        Failure,
        Platform,
        Config,
        Keys,
        Launcher,
        Broker,
        ProducePermanent,
        Outbox,
        Store,
        Idempotency,
        Saga,
        Lab,
        Pool,
        Runs,
        Lifecycle,
        Security,
    )
}

_order = list(Verification)
AUTHENTICITY: frozenset[str] = frozenset(_order[: _order.index(Verification.SIGNER_MISMATCH) + 1])

PERMANENT: frozenset[str] = frozenset(Verification) | {
    Delivery.UNKNOWN_RECIPIENT,
    Delivery.INJECT_DEADLINE_PASSED,
    Config.CONFIG_INVALID,
    Config.INVALID_NAME,
    Failure.VALIDATION_FAILED,
    Failure.HANDLER_REJECTED,
    Lifecycle.RECIPIENT_GONE,
    Lifecycle.NOT_A_CONTROL_KIND,
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


class Retention(enum.StrEnum):
    """A store retention policy refused at load (``docs/store.md``, bounded stores); never
    retriable. R-EFF-4: a key must outlive the longest time its record can come back."""

    DEDUPE_HORIZON_TOO_SHORT = "DEDUPE_HORIZON_TOO_SHORT"  # dedupe < inbox retention + replay
    REPORTED_HORIZON_TOO_SHORT = "REPORTED_HORIZON_TOO_SHORT"  # reporter rows < DLQ retention
    SAGA_HORIZON_TOO_SHORT = "SAGA_HORIZON_TOO_SHORT"  # finished sagas < saga topics + replay


FAMILIES[Retention.__name__] = Retention
