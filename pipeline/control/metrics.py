"""Lifecycle instruments (registry injected; outcome labels from a closed set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

SPAWN_OUTCOMES = (
    "spawned",
    "failed",
    "repeat",
    "refused_cap_exceeded",
    "refused_unknown_profile",
    "refused_not_permitted",
    "refused_ledger_unavailable",  # the job ledger was away (R-SPAWN-7)
)

STOP_OUTCOMES = ("stopped", "already_gone", "repeat", "unknown_worker", "not_permitted")


class LifecycleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.spawns = Counter(
            "fleet_lifecycle_spawns_total",
            "SPAWNs decided by this host's gateway, by outcome (refused_cap_exceeded = caps).",
            ["outcome"],
            registry=registry,
        )

        self.stops = Counter(
            "fleet_lifecycle_stops_total",
            "STOPs decided by this host's gateway, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.reaps = Counter(
            "fleet_lifecycle_reaps_total",
            "Workers this host reaped, by cause (stop = a STOP, died = its process died).",
            ["cause"],
            registry=registry,
        )
        self.recipient_gone = Counter(
            "fleet_lifecycle_recipient_gone_total",
            "Messages dead-lettered RECIPIENT_GONE (for a stopped or reaped worker), by where "
            "(inbox = on arrival, held = held when or after it was reaped).",
            ["where"],
            registry=registry,
        )
        for outcome in STOP_OUTCOMES:
            self.stops.labels(outcome)
        for cause in ("stop", "died"):
            self.reaps.labels(cause)
        for where in ("inbox", "held"):
            self.recipient_gone.labels(where)

    def count_stop(self, outcome: str) -> None:
        self.stops.labels(outcome if outcome in STOP_OUTCOMES else "unknown_worker").inc()

    def count(self, outcome: str) -> None:
        self.spawns.labels(outcome if outcome in SPAWN_OUTCOMES else "failed").inc()
