"""The control plane (seed 000 §7.8): SPAWN requests on ``fleet.control.<host>``.

Requester side only so far: :class:`ControlClient` stages a signed SPAWN through the outbox and
tracks its deadline in :mod:`pipeline.control.requests`.
"""

from .client import UNKNOWN_HOST, ControlClient, SpawnRequest
from .requests import spawn_requests_table

__all__ = ["UNKNOWN_HOST", "ControlClient", "SpawnRequest", "spawn_requests_table"]
