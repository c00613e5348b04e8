"""The control plane (seed 000 §7.8): SPAWN requests on ``fleet.control.<host>``.

Requester side: :class:`ControlClient` stages a signed SPAWN through the outbox and tracks its
deadline as a :data:`~pipeline.control.requests.SPAWN` row of the one deadline tracker
(:mod:`pipeline.gateway.deadlines`): no outcome in time is exactly one ``FAILED``
(``SPAWN_TIMEOUT``) at the requester. :func:`admit` is the target's pure admission check (profile, caps); the
target gateway that consumes ``fleet.control.<host>`` is not built yet (docs/lifecycle.md).
"""

from .caps import Admission, Counts, LifecycleReason, admit
from .client import UNKNOWN_HOST, ControlClient, SpawnRequest
from .requests import SPAWN, SPAWN_TIMEOUT, spawn_requests_table

__all__ = [
    "SPAWN",
    "SPAWN_TIMEOUT",
    "UNKNOWN_HOST",
    "Admission",
    "ControlClient",
    "Counts",
    "LifecycleReason",
    "SpawnRequest",
    "admit",
    "spawn_requests_table",
]
