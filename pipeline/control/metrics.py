"""Lifecycle instruments (registry injected; outcome labels from a closed set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

SPAWN_OUTCOMES = (
    "spawned",
    "failed",
    "repeat",
    "refused_cap_exceeded",
    "refused_unknown_profile",
)


class LifecycleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.spawns = Counter(
            "fleet_lifecycle_spawns_total",
            "SPAWNs decided by this host's gateway, by outcome (refused_cap_exceeded = caps).",
            ["outcome"],
            registry=registry,
        )

    def count(self, outcome: str) -> None:
        self.spawns.labels(outcome if outcome in SPAWN_OUTCOMES else "failed").inc()
