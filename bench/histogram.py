"""A log-bucketed latency histogram in the HDR style, in pure Python (no project dependency).

Values are recorded in microseconds. Below 128 µs each value has its own bucket; above, a bucket
keeps the top 7 significant bits, so a reported percentile is within 1/128 (0.8 %) of the true
value; ``max`` is exact. Memory is bounded by the value range, never by the count.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_BITS = 7


class Histogram:
    def __init__(self) -> None:
        self._buckets: Counter[tuple[int, int]] = Counter()
        self.count = 0
        self.max_us = 0
        self.min_us: int | None = None

    def record_ms(self, value_ms: float) -> None:
        self.record_us(round(value_ms * 1000))

    def record_us(self, value_us: int) -> None:
        v = max(0, int(value_us))
        shift = max(0, v.bit_length() - _BITS)
        self._buckets[(shift, v >> shift)] += 1
        self.count += 1
        self.max_us = max(self.max_us, v)
        self.min_us = v if self.min_us is None else min(self.min_us, v)

    def percentile_us(self, q: float) -> int:
        """The smallest bucket value with at least ``q`` of the records at or below it."""
        if not self.count:
            raise ValueError("empty histogram")
        rank = max(1, round(q * self.count + 0.5 - 1e-9)) if q < 1 else self.count
        seen = 0
        for shift, top in sorted(self._buckets, key=lambda k: k[1] << k[0]):
            seen += self._buckets[(shift, top)]
            if seen >= rank:
                # the bucket's upper edge, clamped to the exact max
                return min(((top + 1) << shift) - 1 if shift else top, self.max_us)
        return self.max_us

    def summary_ms(self) -> dict[str, Any]:
        if not self.count:
            return {"n": 0}
        return {
            "n": self.count,
            "p50": round(self.percentile_us(0.50) / 1000, 2),
            "p99": round(self.percentile_us(0.99) / 1000, 2),
            "p99.9": round(self.percentile_us(0.999) / 1000, 2),
            "max": round(self.max_us / 1000, 2),
        }
