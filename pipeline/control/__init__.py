"""The control plane (seed 000 §7.8): SPAWN requests on ``fleet.control.<host>``.

Requester side only so far: :class:`ControlClient` stages a signed SPAWN through the outbox and
tracks its deadline in :mod:`pipeline.control.requests`; :class:`SpawnDeadlines` turns a
missing outcome into exactly one ``FAILED`` (``SPAWN_TIMEOUT``) at the requester.
"""

from .client import UNKNOWN_HOST, ControlClient, SpawnRequest
from .deadlines import SPAWN_TIMEOUT, SpawnDeadlines
from .requests import spawn_requests_table

__all__ = [
    "SPAWN_TIMEOUT",
    "UNKNOWN_HOST",
    "ControlClient",
    "SpawnDeadlines",
    "SpawnRequest",
    "spawn_requests_table",
]
