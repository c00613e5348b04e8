"""Failure metrics: names per Prometheus conventions, bounded reason labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pipeline.failures.metrics import FailureMetrics


def test_metrics_count_by_bounded_reason_and_gauge_the_quarantine() -> None:
    registry = CollectorRegistry()
    m = FailureMetrics(registry)
    m.dead_lettered("SIG_INVALID")
    m.dead_lettered("SIG_INVALID")
    m.dead_lettered("some-free-text-from-a-handler")
    m.failed_reported.inc()
    m.set_parked(17)
    m.released(ok=True)
    m.released(ok=False)
    get = registry.get_sample_value
    assert get("fleet_dead_letters_total", {"reason": "SIG_INVALID"}) == 2
    assert get("fleet_dead_letters_total", {"reason": "OTHER"}) == 1  # never an unbounded label
    assert get("fleet_failed_reported_total") == 1
    assert get("fleet_parked_records") == 17
    assert get("fleet_quarantined_keys") is None  # the exporter owns it (StoreGauges)
    assert get("fleet_quarantine_releases_total", {"result": "done"}) == 1
    assert get("fleet_quarantine_releases_total", {"result": "failed"}) == 1
