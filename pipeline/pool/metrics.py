"""Pool instruments; registry injected, labels from closed sets (the pool name is configuration)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class PoolMetrics:
    """Also the dispatcher's ``InflightObserver``."""

    def __init__(self, registry: CollectorRegistry, *, pool: str, namespace: str = "fleet") -> None:
        self.pool = pool
        kw: dict[str, object] = {"namespace": namespace, "registry": registry}
        self.in_flight_steps = Gauge(
            "pool_in_flight_steps",
            "Steps running on worker threads.",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )
        self.paused = Gauge(
            "pool_paused_partitions",
            "Partitions paused because their lane buffer is full (polling goes on).",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )
        self.step_seconds = Histogram(
            "pool_step_seconds",
            "Duration of steps that ran (stored results reused are not steps).",
            ["pool", "result"],
            buckets=STEP_BUCKETS,
            **kw,  # type: ignore[arg-type]
        )
        self.reused = Counter(
            "pool_results_reused_total",
            "Redelivered records whose stored result was reused: no second model call.",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )
        self.given_up = Counter(
            "pool_steps_given_up_total",
            "Steps still running when their partition was revoked (their offsets stay uncommitted).",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )

        self.oldest_step = Gauge(
            "pool_oldest_step_seconds",
            "Age of the oldest step running on this member (0 when idle), at the last heartbeat.",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )
        self.leases_lost = Counter(
            "pool_step_leases_lost_total",
            "Step keys this member held whose lease another member took over while it ran.",
            ["pool"],
            **kw,  # type: ignore[arg-type]
        )

    # InflightObserver
    def in_flight(self, n: int) -> None:
        self.in_flight_steps.labels(self.pool).set(n)

    def paused_count(self, n: int) -> None:
        self.paused.labels(self.pool).set(n)

    def given_up_count(self, n: int) -> None:
        self.given_up.labels(self.pool).inc(n)
