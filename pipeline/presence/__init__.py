"""Presence: signed heartbeats on the compacted roster and the union view built from them
(seed 000 §8 step 5; DESIGN.md §1 roster row)."""

from .follower import RosterFollower
from .model import (
    Delivery,
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

__all__ = [
    "Delivery",
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
