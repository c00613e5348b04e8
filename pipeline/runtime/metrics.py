"""Runtime instruments; registry injected, label values from closed sets only."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

OUTCOME_LABELS = ("ack", "retry", "dead_letter", "quarantine", "parked", "duplicate")


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry, *, namespace: str = "fleet") -> None:
        self.records = Counter(
            "consumer_records_total",
            "Records handled by the consumer runtime, by outcome.",
            ["group", "outcome"],
            namespace=namespace,
            registry=registry,
        )
        self.dedupe_hits = Counter(
            "dedupe_hits_total",
            "Records dropped because their msgId was already applied (redelivery or resend).",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
        self.rebalances = Counter(
            "consumer_rebalances_total",
            "Partition assignment changes seen by this consumer.",
            ["group", "kind"],
            namespace=namespace,
            registry=registry,
        )
        self.commit_failures = Counter(
            "consumer_commit_failures_total",
            "Offset commits that failed: synchronous (forward effects skipped) or async (pull).",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
        self.commit_retries = Counter(
            "consumer_commit_retries_total",
            "Synchronous offset commits tried again because the group coordinator was moving.",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
        self.store_failures = Counter(
            "consumer_store_failures_total",
            "Store reads and batch transactions that failed; the batch is re-read after a backoff.",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
        self.offsets_lost = Counter(
            "consumer_offsets_lost_total",
            "Offsets deleted (retention) before the group read them, found at assignment; the "
            "consumer then stops with OFFSETS_LOST instead of skipping them.",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
        self.paused_partitions = Gauge(
            "consumer_paused_partitions",
            "Partitions paused while a record waits for its retry.",
            ["group"],
            namespace=namespace,
            registry=registry,
        )
