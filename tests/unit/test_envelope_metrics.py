"""Rejections are counted by reason with bounded labels (DESIGN.md §6)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pipeline.envelope import Kind
from pipeline.envelope import reasons as r
from pipeline.envelope.metrics import EnvelopeMetrics


def test_reasons_counted_and_unknown_reasons_folded() -> None:
    reg = CollectorRegistry()
    m = EnvelopeMetrics(reg)
    assert reg.get_sample_value("fleet_envelope_rejected_total", {"reason": r.REPLAY}) == 0
    m.reject(r.SIG_INVALID)
    m.reject("SOMETHING_NEW")
    m.ok(Kind.SEND)
    assert reg.get_sample_value("fleet_envelope_rejected_total", {"reason": r.SIG_INVALID}) == 1
    assert reg.get_sample_value("fleet_envelope_rejected_total", {"reason": "OTHER"}) == 1
    assert reg.get_sample_value("fleet_envelope_verified_total", {"kind": "SEND"}) == 1
