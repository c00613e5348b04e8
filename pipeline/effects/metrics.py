"""Idempotency and saga instruments on an injected registry; labels from bounded sets only."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge


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


class SagaMetrics:
    """Sagas finished by state, compensations run, approvals expired; sagas by state and the
    human-queue depth are gauges refreshed from the store (:meth:`observe_store`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.finished = Counter(
            "fleet_saga_finished",
            "Sagas reaching a terminal state.",
            ["definition", "state"],
            registry=registry,
        )
        self.compensations = Counter(
            "fleet_saga_compensations", "Compensations applied.", ["definition"], registry=registry
        )
        self.approvals_expired = Counter(
            "fleet_saga_approvals_expired",
            "Approvals that expired without a decision.",
            ["definition"],
            registry=registry,
        )
        self.by_state = Gauge(
            "fleet_saga_sagas", "Sagas by state (from the store).", ["state"], registry=registry
        )
        self.human_queue_depth = Gauge(
            "fleet_saga_human_queue_depth", "Sagas waiting for a person.", registry=registry
        )

    def observe_store(self, counts: Mapping[str, int]) -> None:
        for state, n in counts.items():
            self.by_state.labels(state).set(n)
        self.human_queue_depth.set(counts.get("human", 0))
