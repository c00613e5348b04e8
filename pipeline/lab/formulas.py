"""The R-LAB arithmetic, one pure function each (scenario time: seconds, events per second).

``math.inf`` stands for "never" (a backlog that does not drain); the report prints it as such.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def in_flight(rate: float, step_s: float) -> float:
    """Little's law: work in the system = arrival rate x time in the system (20 x 2.0 = 40)."""
    return rate * step_s


def capacity(busy_lanes: float, step_s: float) -> float:
    """Events per second when every lane is busy: 48 partitions / 2.0 s = 24/s."""
    return busy_lanes / step_s


def utilisation(rate: float, cap: float) -> float:
    return math.inf if cap <= 0 else rate / cap


def backlog(rate: float, outage_s: float) -> float:
    """Events that arrive while nobody consumes: 20/s x 180 s = 3,600."""
    return rate * outage_s


def drain_seconds(backlog_events: float, cap: float, rate: float) -> float:
    """``backlog / (capacity - rate)``; ``inf`` (never) when capacity does not exceed arrivals.

    3,600 / (24 - 20) = 900 s; with 40 partitions, 20 - 20 = 0: never."""
    if backlog_events <= 0:
        return 0.0
    headroom = cap - rate
    if headroom <= 1e-12:
        return math.inf
    return backlog_events / headroom


def duplicates_bound(members: int, max_poll_records: int) -> int:
    """Commit after each batch: each member holds at most one uncommitted batch (4 x 50 = 200)."""
    return members * max_poll_records


def lag_drain_seconds(lags: Sequence[int], in_rate: float, out_rate: float) -> float:
    """R-LAB-3: lags 50 + 0 + 160 = 210 at 30/s in and 45/s out: 210 / 15 = 14 s."""
    return drain_seconds(float(sum(lags)), out_rate, in_rate)


def poison_stall_seconds(
    backoffs_s: Sequence[float], *, step_s: float = 0.0, count_attempts: bool = False
) -> float:
    """A partition blocked behind a retried record: 1 + 2 + 4 + 8 + 16 = 31 s (attempts not
    counted, as in R-LAB-4; ``count_attempts`` adds one step per attempt, the first included)."""
    stall = float(sum(backoffs_s))
    if count_attempts:
        stall += step_s * (len(backoffs_s) + 1)
    return stall


def events_behind(
    stall_s: float, rate: float, partitions: int, share: float | None = None
) -> float:
    """Records queued behind the poison record: 31 s x 20/48 per second = 12.9, about 13."""
    per_partition = rate * (share if share is not None else 1.0 / partitions)
    return stall_s * per_partition


def batch_seconds(max_poll_records: int, worst_step_s: float) -> float:
    """A loop that handles a whole batch before polling again: 50 x 7 s = 350 s."""
    return max_poll_records * worst_step_s


def exceeds_poll_interval(max_poll_records: int, worst_step_s: float, interval_ms: int) -> bool:
    """350 s > 300 s: the member is treated as failed (R-FAIL-2)."""
    return batch_seconds(max_poll_records, worst_step_s) * 1000.0 > interval_ms


def ratio(measured: float | None, predicted: float | None) -> float | None:
    """measured / predicted; None when either side is missing, zero or infinite."""
    if measured is None or predicted is None:
        return None
    if predicted == 0 or math.isinf(predicted) or math.isinf(measured):
        return None
    return measured / predicted
