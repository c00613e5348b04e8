"""Who an entity is and how it takes delivery: the enums the gateway's config reads.

They live apart from :mod:`.model` (which signs presence records) so that reading a config --
what every ``fleet send`` does first -- loads no cryptography.
"""

from __future__ import annotations

import enum


class Role(enum.StrEnum):
    """What an entity is in the fleet (R-ENV-7). Defined once: the gateway's config accepts
    :data:`ENTITY_ROLES`; ``gateway`` names only a host's own roster entry."""

    WORKER = "worker"
    MAIN = "main"
    ORCHESTRATOR = "orchestrator"
    GATEWAY = "gateway"  # the host entry only


class Delivery(enum.StrEnum):
    """How an entity takes delivery. Defined once: the gateway's config accepts
    :data:`ENTITY_DELIVERIES`; ``none`` names only a host's own roster entry."""

    INJECT = "inject"  # forward path: at-most-once inject + INJECTED
    PULL = "pull"  # pull path: at-least-once held store
    NONE = "none"  # the host entry only


# What a local entity (config, runtime registration) may be: everything but the host entry.
ENTITY_ROLES: tuple[Role, ...] = (Role.WORKER, Role.MAIN, Role.ORCHESTRATOR)
ENTITY_DELIVERIES: tuple[Delivery, ...] = (Delivery.INJECT, Delivery.PULL)
