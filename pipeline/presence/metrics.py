"""Presence instruments (registry injected; labels from closed sets only)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from pipeline.kafka.errors import BrokerErrorClass


class PresenceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.roster_stale = Gauge(
            "fleet_roster_stale",
            "1 while the roster follower is cut off (cannot fetch, or lags the roster's log end): "
            "entries keep their last state.",
            registry=registry,
        )
        self.roster_horizon_age = Gauge(
            "fleet_roster_horizon_age_seconds",
            "Age of the newest moment up to which the follower has read the whole roster.",
            registry=registry,
        )
        self.roster_broker_errors = Counter(
            "fleet_roster_broker_errors_total",
            "Broker errors met by the roster follower, by class (transient ones are waited out).",
            ["error_class"],
            registry=registry,
        )
        for c in BrokerErrorClass:
            self.roster_broker_errors.labels(c.value)
        self.heartbeat_failures = Counter(
            "fleet_presence_heartbeat_failures_total",
            "Presence records (heartbeats, tombstones) the broker did not take.",
            registry=registry,
        )
        self.publisher_failing = Gauge(
            "fleet_presence_publisher_failing",
            "1 from the first undelivered heartbeat until one is delivered again.",
            registry=registry,
        )
        self.incarnation = Gauge(
            "fleet_presence_incarnation",
            "This gateway's incarnation: its start count, which orders its presence records "
            "ahead of their timestamps.",
            registry=registry,
        )
