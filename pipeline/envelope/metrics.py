"""Envelope instruments (DESIGN.md §6: verification failures by reason); registry injected,
label values only from the closed set of reason codes and kinds."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from .reasons import ALL_REASONS, Kind

OTHER = "OTHER"


class EnvelopeMetrics:
    def __init__(self, registry: CollectorRegistry, *, namespace: str = "fleet") -> None:
        self.verified = Counter(
            "envelope_verified_total",
            "Records that passed every verification stage, by kind.",
            ["kind"],
            namespace=namespace,
            registry=registry,
        )
        self.rejected = Counter(
            "envelope_rejected_total",
            "Records rejected by the envelope verifier, by reason code.",
            ["reason"],
            namespace=namespace,
            registry=registry,
        )
        self.verify_seconds = Histogram(
            "envelope_verify_seconds",
            "Time to verify one record (bounds, signature, presence, expiry, replay).",
            namespace=namespace,
            registry=registry,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
        )
        for reason in ALL_REASONS:  # every series exists from the start: rate() works at once
            self.rejected.labels(reason=reason)

    def ok(self, kind: Kind) -> None:
        self.verified.labels(kind=kind.value).inc()

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason=reason if reason in ALL_REASONS else OTHER).inc()
