"""How current a roster view is: the follower's horizon and whether it is cut off."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Freshness:
    """``horizon_ms``: wall-clock time up to which every roster record has been read (the
    follower asked the log end at that time and has since consumed up to it). ``None`` = judge
    against the clock (a one-shot view that has just caught up, or a test).

    ``stale``: the follower is cut off (it cannot fetch, or it lags the roster's log end) for
    longer than its tolerance; ``why`` says what it last saw."""

    horizon_ms: int | None = None
    stale: bool = False
    why: str = ""

    def age_s(self, now_ms: int) -> float | None:
        return None if self.horizon_ms is None else max(0.0, (now_ms - self.horizon_ms) / 1000)

    def as_json(self, now_ms: int) -> dict[str, object]:
        return {
            "stale": self.stale,
            "horizon_ms": self.horizon_ms,
            "horizon_age_s": self.age_s(now_ms),
            "why": self.why,
        }
