"""Prometheus instruments for failure handling (registry injected; label values bounded)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from pipeline import reasons

KNOWN_REASONS = reasons.DEAD_LETTER_REASONS


def reason_label(reason: str) -> str:
    """Reason codes are a closed set on dashboards: anything unknown is counted as ``OTHER``."""
    return reasons.label(reason, KNOWN_REASONS)


class FailureMetrics:
    """Dead letters, FAILED reports, parked records and releases (R-DLQ-3: a DLQ has an owner,
    so its inflow and the quarantine backlog must be visible and alertable)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dead_letters = Counter(
            "fleet_dead_letters_total",
            "Records written to the dead-letter topic, by reason code.",
            ["reason"],
            registry=registry,
        )
        self.failed_reported = Counter(
            "fleet_failed_reported_total",
            "FAILED messages emitted to senders by the DLQ reporter.",
            registry=registry,
        )
        self.parked_records = Gauge(
            "fleet_parked_records",
            "Records parked behind quarantined keys (dead letters not counted).",
            registry=registry,
        )
        self.releases = Counter(
            "fleet_quarantine_releases_total",
            "Quarantine releases executed, by result (done, failed).",
            ["result"],
            registry=registry,
        )

    def dead_lettered(self, reason: str) -> None:
        self.dead_letters.labels(reason=reason_label(reason)).inc()

    def released(self, *, ok: bool) -> None:
        self.releases.labels(result="done" if ok else "failed").inc()

    def set_parked(self, parked: int) -> None:
        """Feed from :meth:`QuarantineStore.parked_records` (e.g. every few seconds).

        ``fleet_quarantined_keys`` is NOT here: the exporter publishes it through its
        ``StoreGauges`` port (:meth:`QuarantineStore.quarantined_keys`), so it exists once.
        """
        self.parked_records.set(parked)
