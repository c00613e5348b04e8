"""Lag arithmetic: never negative, idle = 0 s, retention risk flagged before loss."""

from __future__ import annotations

import pytest

from pipeline.observability.model import LagStatus, PartitionLag, Thresholds, age_seconds, worst


def row(**kw: object) -> PartitionLag:
    base: dict[str, object] = {
        "group": "fleet.g",
        "topic": "fleet.t",
        "partition": 0,
        "committed": 100,
        "log_start": 0,
        "log_end": 100,
        "lag_seconds": 0.0,
        "retention_ms": None,
    }
    base.update(kw)
    return PartitionLag(**base)  # type: ignore[arg-type]


def test_lag_messages_is_end_minus_committed_and_never_negative() -> None:
    assert row(committed=1150, log_end=1200).lag_messages == 50  # the R-LAB-3 numbers
    assert row(committed=1180, log_end=1180).lag_messages == 0
    # committed read a moment after the log end (two separate calls): clamped, not -3
    assert row(committed=103, log_end=100).lag_messages == 0


def test_idle_caught_up_partition_reads_zero_seconds_however_old_its_last_record() -> None:
    assert age_seconds(now_ms=10_000_000, record_ts_ms=1, lag_messages=0) == 0.0


def test_age_is_now_minus_record_timestamp_and_clamped_for_clock_skew() -> None:
    assert age_seconds(now_ms=10_000, record_ts_ms=4_000, lag_messages=5) == 6.0
    # producer clock ahead of ours: 0, never negative (kafka_exporter's negative-lag complaint)
    assert age_seconds(now_ms=10_000, record_ts_ms=12_000, lag_messages=5) == 0.0
    assert age_seconds(now_ms=10_000, record_ts_ms=None, lag_messages=5) is None
    assert age_seconds(now_ms=10_000, record_ts_ms=-1, lag_messages=5) is None


def test_fresh_topic_reader_at_offset_zero_is_not_at_risk() -> None:
    # nothing truncated yet and no time limit: the offset ratio says nothing
    r = row(committed=0, log_start=0, log_end=100, lag_seconds=5.0)
    assert r.retention_risk_ratio == 0.0
    assert r.status(Thresholds()) is LagStatus.LAGGING


def test_truncating_log_flags_group_near_log_start_before_loss() -> None:
    """R-OBS-4: a group slower than retention silently skips -- we flag it first."""
    r = row(committed=10, log_start=5, log_end=100)
    assert r.lost_messages == 0
    assert r.retention_risk_ratio == pytest.approx(90 / 95)
    assert r.status(Thresholds(retention_risk=0.8)) is LagStatus.AT_RISK


def test_time_ratio_uses_retention_ms() -> None:
    r = row(committed=10, log_end=20, lag_seconds=90.0, retention_ms=100_000)
    assert r.retention_risk_ratio == pytest.approx(0.9)
    assert r.retention_headroom_seconds == pytest.approx(10.0)
    assert r.status(Thresholds()) is LagStatus.AT_RISK


def test_committed_below_log_start_is_lost_and_ratio_above_one() -> None:
    r = row(committed=10, log_start=50, log_end=100)
    assert r.lost_messages == 40
    assert r.retention_risk_ratio > 1.0
    assert r.status(Thresholds()) is LagStatus.LOST


def test_status_order_and_slo() -> None:
    assert row(committed=90, lag_seconds=400.0).status(Thresholds()) is LagStatus.BEHIND
    assert row().status(Thresholds()) is LagStatus.OK
    assert worst([LagStatus.OK, LagStatus.BEHIND, LagStatus.LAGGING]) is LagStatus.BEHIND
    assert worst([]) is LagStatus.OK
