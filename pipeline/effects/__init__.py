"""Effects that happen once (seed 001): idempotency keys with stored results, and sagas.

Idempotency: declare :class:`KeyClass` es (their retention must cover the replay window), build an
:class:`IdempotencyStore`, and in the effect's transaction ``reserve`` a key derived from the event
(:func:`key_from_msg_id`, :func:`key_from_identity`), act only on :class:`FirstUse`, and
``complete``/``fail`` in the same transaction. ``docs/effects.md`` has the crash windows.
"""

from .keys import key_from_identity, key_from_msg_id, payload_hash
from .metrics import IdempotencyMetrics, ReserveOutcome
from .reasons import EffectsReason
from .reservation import Done, FirstUse, InProgress, Mismatch, Reservation, StoredError
from .retention import KeyClass
from .store import IdempotencyStore, KeyRecord, find_key, list_keys
from .tables import KeyState, idempotency

__all__ = [
    "Done",
    "EffectsReason",
    "FirstUse",
    "IdempotencyMetrics",
    "IdempotencyStore",
    "InProgress",
    "KeyClass",
    "KeyRecord",
    "KeyState",
    "Mismatch",
    "Reservation",
    "ReserveOutcome",
    "StoredError",
    "find_key",
    "idempotency",
    "key_from_identity",
    "key_from_msg_id",
    "list_keys",
    "payload_hash",
]
