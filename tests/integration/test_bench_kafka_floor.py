"""The latency rows' floor (bench/kafka_floor.py) on the real broker: every record is timed.

A floor that dropped records, or timed the warm-up, would make the latency rows' ratios to it
meaningless; this checks both, at a small rate, bounded in count and time.
"""

from __future__ import annotations

from bench import kafka_floor
from pipeline.testing import BrokerHandle


def test_every_record_is_timed_one_hop_and_every_other_one_round_trip(
    kafka: BrokerHandle,
) -> None:
    out = kafka_floor.measure(kafka.bootstrap, rate=100, seconds=1.0)
    assert out["one_hop_ms"]["n"] == out["one_hop_ms"]["of"] == 100
    assert out["round_trip_ms"]["n"] == out["round_trip_ms"]["of"] == 50
    hop, trip = out["one_hop_ms"], out["round_trip_ms"]
    assert 0 < hop["p50"] <= hop["p99"] <= hop["max"]
    # a round trip rides two hops: its median cannot be under one hop's
    assert trip["p50"] >= hop["p50"] * 0.9
