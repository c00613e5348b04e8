"""Time to drain today's lag, per group, at the measured consume and arrival rates (pure).

R-OBS-3: lags 50 + 0 + 160 = 210 at 30/s in and 45/s out drain in 210 / (45 - 30) = 14 s;
when consumption does not outpace arrivals the lag never drains (``inf``; ``+Inf`` in
Prometheus, "never" in ``fleet lag``). The same formula serves ``fleet lab predict``
(:func:`pipeline.lab.formulas.lag_drain_seconds`).

Rates come from two samples of the same partitions: committed offsets moved (consumed) and log
ends moved (arrived), divided by the time between the samples. A partition seen in only one of
the two samples is left out of both rates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.lab.formulas import lag_drain_seconds

from .model import PartitionLag

Positions = dict[tuple[str, str, int], tuple[int, int]]  # (group, topic, part) -> (committed, end)


@dataclass(frozen=True, kw_only=True)
class GroupDrain:
    """One group's lag and rates; rates are ``None`` until two samples exist."""

    group: str
    lag_messages: int
    consume_rate: float | None = None
    arrival_rate: float | None = None

    @property
    def drain_seconds(self) -> float | None:
        if self.lag_messages == 0:
            return 0.0
        if self.consume_rate is None or self.arrival_rate is None:
            return None
        return lag_drain_seconds([self.lag_messages], self.arrival_rate, self.consume_rate)


def positions(rows: Iterable[PartitionLag]) -> Positions:
    return {(r.group, r.topic, r.partition): (r.committed, r.log_end) for r in rows}


def group_drains(
    rows: Iterable[PartitionLag], *, before: Positions | None, seconds: float
) -> tuple[GroupDrain, ...]:
    """Per group: total lag now, and rates since ``before`` (taken ``seconds`` earlier)."""
    lag: dict[str, int] = {}
    consumed: dict[str, int] = {}
    arrived: dict[str, int] = {}
    for r in rows:
        lag[r.group] = lag.get(r.group, 0) + r.lag_messages
        old = (before or {}).get((r.group, r.topic, r.partition))
        if old is None:
            continue
        consumed[r.group] = consumed.get(r.group, 0) + max(0, r.committed - old[0])
        arrived[r.group] = arrived.get(r.group, 0) + max(0, r.log_end - old[1])
    timed = before is not None and seconds > 0
    return tuple(
        GroupDrain(
            group=g,
            lag_messages=lag[g],
            consume_rate=consumed.get(g, 0) / seconds if timed else None,
            arrival_rate=arrived.get(g, 0) / seconds if timed else None,
        )
        for g in sorted(lag)
    )
