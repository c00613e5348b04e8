"""Idempotency and saga instruments on an injected registry; labels from bounded sets only."""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter


class ReserveOutcome(enum.StrEnum):
    FIRST_USE = "first_use"
    DONE = "done"
    IN_PROGRESS = "in_progress"
    MISMATCH = "mismatch"
    EXPIRED_RESTART = "expired_restart"  # the key outlived its retention: a new request
    LEASE_TAKEOVER = "lease_takeover"  # an in-progress holder's lease ran out


class IdempotencyMetrics:
    """Reservations by key class (declared, bounded) and outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reservations = Counter(
            "fleet_idempotency_reservations",
            "Idempotency reservations by key class and outcome.",
            ["key_class", "outcome"],
            registry=registry,
        )
