"""Retry policy: exponential backoff with jitter, bounded attempts (seed 001 scenario 3)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class BackoffPolicy:
    """``delay_for(n)`` = min(max_s, base_s * factor**(n-1)) +/- jitter; ``max_attempts`` tries."""

    base_s: float = 0.2
    factor: float = 2.0
    max_s: float = 30.0
    max_attempts: int = 5
    jitter: float = 0.2

    def delay_for(self, attempt: int) -> float:
        raw = min(self.max_s, self.base_s * self.factor ** max(0, attempt - 1))
        spread = raw * self.jitter
        return max(0.0, raw + random.uniform(-spread, spread))

    def exhausted(self, attempt: int) -> bool:
        return attempt >= self.max_attempts
