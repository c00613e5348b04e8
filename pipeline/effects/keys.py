"""Idempotency keys derive from the event, never from the attempt (R-EFF-1).

"A key made fresh on each retry defeats the purpose; use the event id or a hash of the business
identity." Both helpers here are pure and deterministic: the same event gives the same key in
every process, on every redelivery. :func:`payload_hash` fingerprints the request so a key reused
with a different payload is told apart (HTTP 422).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pipeline.errors import ConfigError
from pipeline.reasons import Idempotency

MAX_KEY_LENGTH = 255  # Stripe's bound; the column is sized for it


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ConfigError(
            f"idempotency key must be 1..{MAX_KEY_LENGTH} characters, got {len(key)}",
            reason=Idempotency.IDEM_KEY_INVALID,
        )
    return key


def key_from_msg_id(msg_id: str, *, step: str | None = None) -> str:
    """The key of an event's effect: its ``msgId`` (optionally per named step of its handling)."""
    check_key(msg_id)
    return check_key(msg_id if step is None else f"{msg_id}:{step}")


def key_from_identity(namespace: str, *parts: object) -> str:
    """A key from the business identity (``"refund", order_id, line``): a SHA-256 of its parts.

    The namespace stays readable in front of the hash so ``fleet idem ls`` can be scanned.
    """
    if not namespace or not parts:
        raise ConfigError(
            "key_from_identity needs a namespace and at least one identity part",
            reason=Idempotency.IDEM_KEY_INVALID,
        )
    canonical = json.dumps([namespace, *[str(p) for p in parts]], separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return check_key(f"{namespace}:{digest}")


def payload_hash(payload: Any) -> str:
    """SHA-256 of the payload: bytes as they are, anything else as canonical JSON."""
    if isinstance(payload, bytes | bytearray | memoryview):
        raw = bytes(payload)
    elif isinstance(payload, str):
        raw = payload.encode("utf-8")
    else:
        raw = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()
