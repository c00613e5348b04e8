"""Retention instruments (registry injected; the ``table`` label is :class:`StoreTable`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RetentionMetrics:
    """Rows purged per table (a counter) and rows per table (a gauge, after each pass): a table
    whose rows keep climbing while nothing is purged has a retention that never matches."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.purged = Counter(
            "fleet_store_rows_purged",
            "Rows deleted by the store purger, by table.",
            ["table"],
            registry=registry,
        )
        self.rows = Gauge(
            "fleet_store_rows",
            "Rows per bounded table, counted after each purge pass.",
            ["table"],
            registry=registry,
        )
