"""Presence: signed heartbeats on the compacted roster and the union view built from them
(R-PRES-2; R-TOP-1).

Names resolve lazily: ``gateway.config`` reads :mod:`.model`, and must not pull the roster
follower's Kafka client and metrics into every ``fleet`` command that loads a config.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .follower import RosterFollower
    from .model import (
        Delivery,
        Gone,
        PresenceEntry,
        Role,
        SpawnProfile,
        gateway_gid,
        presence_record,
        tombstone_record,
    )
    from .publisher import PresencePublisher
    from .roster import RosterView
    from .static import StaticPresence

_EXPORTS: dict[str, str] = {
    "Delivery": "model",
    "Gone": "model",
    "PresenceEntry": "model",
    "Role": "model",
    "SpawnProfile": "model",
    "gateway_gid": "model",
    "presence_record": "model",
    "tombstone_record": "model",
    "RosterFollower": "follower",
    "PresencePublisher": "publisher",
    "RosterView": "roster",
    "StaticPresence": "static",
}

__all__ = [
    "Delivery",
    "Gone",
    "PresenceEntry",
    "PresencePublisher",
    "Role",
    "RosterFollower",
    "RosterView",
    "SpawnProfile",
    "StaticPresence",
    "gateway_gid",
    "presence_record",
    "tombstone_record",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
