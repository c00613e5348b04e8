"""Effects that happen once (R-EFF, R-SAGA): idempotency keys with stored results, and sagas.

Idempotency: declare :class:`KeyClass` es (their retention must cover the replay window), build an
:class:`IdempotencyStore`, and in the effect's transaction ``reserve`` a key derived from the event
(:func:`key_from_msg_id`, :func:`key_from_identity`), act only on :class:`FirstUse`, and
``complete``/``fail`` in the same transaction. ``docs/effects.md`` has the crash windows.

Sagas: :class:`SagaOrchestrator` keeps one record per saga and sends commands through the outbox;
:class:`Participant` runs each step and compensation under its own idempotency key.
``docs/sagas.md`` has the states and crash windows.
"""

from pipeline.effects.key_classes import KeyClass

from .inproc import drain
from .keys import key_from_identity, key_from_msg_id, payload_hash
from .metrics import IdempotencyMetrics, ReserveOutcome, SagaMetrics
from .orchestrator import SagaOrchestrator
from .participant import SAGA_KEY_CLASS, Participant, ReplyHandler, StepFailed
from .reservation import Done, FirstUse, InProgress, Mismatch, Reservation, StoredError
from .saga_model import Command, Phase, Reply, SagaDefinition, SagaState, SagaStep, step_key
from .saga_record import SagaRecord, list_sagas, state_counts
from .saga_topics import SagaTopics
from .store import IdempotencyStore, KeyRecord, find_key, list_keys
from .tables import KeyState, idempotency

__all__ = [
    "SAGA_KEY_CLASS",
    "Command",
    "Done",
    "FirstUse",
    "IdempotencyMetrics",
    "IdempotencyStore",
    "InProgress",
    "KeyClass",
    "KeyRecord",
    "KeyState",
    "Mismatch",
    "Participant",
    "Phase",
    "Reply",
    "ReplyHandler",
    "Reservation",
    "ReserveOutcome",
    "SagaDefinition",
    "SagaMetrics",
    "SagaOrchestrator",
    "SagaRecord",
    "SagaState",
    "SagaStep",
    "SagaTopics",
    "StepFailed",
    "StoredError",
    "drain",
    "find_key",
    "idempotency",
    "key_from_identity",
    "key_from_msg_id",
    "list_keys",
    "list_sagas",
    "payload_hash",
    "state_counts",
    "step_key",
]
