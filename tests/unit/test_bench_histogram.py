"""The bench's HDR-style histogram (bench/histogram.py): percentiles within 1/128 of the truth."""

from __future__ import annotations

import random

import pytest

from bench.histogram import Histogram


def test_percentiles_are_within_one_part_in_128_and_max_is_exact() -> None:
    rng = random.Random(17)
    values = [rng.lognormvariate(8, 1.5) for _ in range(20000)]  # µs, long-tailed
    h = Histogram()
    for v in values:
        h.record_us(round(v))
    exact = sorted(round(v) for v in values)
    for q in (0.5, 0.99, 0.999):
        truth = exact[max(0, int(q * len(exact) + 0.5) - 1)]
        assert abs(h.percentile_us(q) - truth) <= truth / 128 + 1, q
    assert h.max_us == exact[-1] and h.count == len(values)
    s = h.summary_ms()
    assert s["p50"] <= s["p99"] <= s["p99.9"] <= s["max"]


def test_small_values_are_exact_and_an_empty_histogram_says_so() -> None:
    h = Histogram()
    for v in (1, 2, 3, 100):
        h.record_us(v)
    assert [h.percentile_us(q) for q in (0.25, 0.5, 0.75, 1.0)] == [1, 2, 3, 100]
    assert Histogram().summary_ms() == {"n": 0}
    with pytest.raises(ValueError):
        Histogram().percentile_us(0.5)
