"""The control plane (R-SPAWN, R-LIFE): SPAWN and STOP on
``fleet.control.<host>``.

Requester side: :class:`ControlClient` stages a signed SPAWN or STOP through the outbox; a
SPAWN's (STOP's) deadline is a :data:`~pipeline.control.requests.SPAWN` (``STOP``) row of the
one deadline tracker (:mod:`pipeline.host.deadlines`): no outcome in time is exactly one
``FAILED`` (``SPAWN_TIMEOUT``, ``STOP_TIMEOUT``) at the requester. Target side:
:class:`~pipeline.control.handler.SpawnHandler` (dedupe by ``spawnId``, :func:`admit`'s caps,
launch after commit), :class:`~pipeline.control.stop_handler.StopHandler` (dedupe by
``stopId``) and :class:`~pipeline.control.reaper.Reaper` (stop or death -> tombstone +
``reaped``). See docs/lifecycle.md.
"""

from .caps import Admission, Counts, admit
from .client import UNKNOWN_HOST, ControlClient, SpawnRequest, StopRequest
from .requests import SPAWN, SPAWN_TIMEOUT, STOP, STOP_TIMEOUT, spawn_requests_table

__all__ = [
    "SPAWN",
    "SPAWN_TIMEOUT",
    "STOP",
    "STOP_TIMEOUT",
    "UNKNOWN_HOST",
    "Admission",
    "ControlClient",
    "Counts",
    "SpawnRequest",
    "StopRequest",
    "admit",
    "spawn_requests_table",
]
