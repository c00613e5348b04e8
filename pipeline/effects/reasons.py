"""Reason codes of the effects subsystem (idempotency keys, sagas): public API, never renamed.

Dashboards, the CLI and HTTP answers key on these strings; each means exactly one thing.
"""

from __future__ import annotations

import enum


class EffectsReason(enum.StrEnum):
    """Why an idempotency or saga operation was refused (seed 001: idempotency keys, sagas)."""

    # configuration time: a key store that forgets before the topic does lets a replay repeat
    RETENTION_SHORTER_THAN_REPLAY = "IDEM_RETENTION_SHORTER_THAN_REPLAY"
    UNKNOWN_KEY_CLASS = "IDEM_UNKNOWN_KEY_CLASS"
    KEY_UNKNOWN = "IDEM_KEY_UNKNOWN"  # fleet idem show: no such key
    KEY_INVALID = "IDEM_KEY_INVALID"  # empty, or longer than 255 characters
    KEY_MISSING = "IDEM_KEY_MISSING"  # HTTP 400: a required Idempotency-Key header is absent
    IN_PROGRESS = "IDEM_IN_PROGRESS"  # HTTP 409: the first request with this key is still running
    PAYLOAD_MISMATCH = "IDEM_PAYLOAD_MISMATCH"  # HTTP 422: same key, different payload
    NOT_RESERVED = "IDEM_NOT_RESERVED"  # complete/fail on a key nobody holds in progress
    # sagas
    SAGA_UNKNOWN = "SAGA_UNKNOWN"
    SAGA_NOT_IN_HUMAN_QUEUE = "SAGA_NOT_IN_HUMAN_QUEUE"
    SAGA_NOT_AWAITING = "SAGA_NOT_AWAITING"  # a decision for a saga not waiting for one
    SAGA_DEFINITION_INVALID = "SAGA_DEFINITION_INVALID"
    COMPENSATION_EXHAUSTED = "SAGA_COMPENSATION_EXHAUSTED"
    APPROVAL_EXPIRED = "SAGA_APPROVAL_EXPIRED"
    APPROVAL_REJECTED = "SAGA_APPROVAL_REJECTED"
    STEP_FAILED = "SAGA_STEP_FAILED"
