"""Pure lag arithmetic: one partition's position against its log, no I/O.

The numbers the exporter, ``fleet lag`` and the alert rules agree on are all computed here:

* ``lag_messages = max(0, log_end - committed)`` -- Kafka's own definition (the
  ``kafka-consumer-groups --describe`` LAG column). Never negative: a committed offset read a
  moment after the log end cannot make it so.
* ``lag_seconds`` -- the age of the oldest unread record, ``now - timestamp(record at committed)``,
  clamped at 0; exactly 0 when ``lag_messages == 0``. See ``docs/observability.md``.
* ``lost_messages = max(0, log_start - committed)`` -- records Kafka deleted before the group
  read them (R-OBS-4: a group down longer than retention silently skips).
* ``retention_risk_ratio`` -- how much of the retention allowance the unread backlog has used:
  1.0 means the next retention pass deletes unread records; above 1.0 it already has. See
  :attr:`PartitionLag.retention_risk_ratio`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class LagStatus(enum.StrEnum):
    """A bounded status per partition, worst first when summarised (Burrow-like, plus seconds)."""

    LOST = "LOST"  # committed offset below the log start: unread records were deleted
    AT_RISK = "AT_RISK"  # retention risk at or above the threshold: deletion is close
    BEHIND = "BEHIND"  # time lag over the SLO
    LAGGING = "LAGGING"  # some lag, within the SLO
    OK = "OK"  # caught up


_SEVERITY = {s: i for i, s in enumerate(LagStatus)}


def worst(statuses: list[LagStatus]) -> LagStatus:
    return min(statuses, key=_SEVERITY.__getitem__, default=LagStatus.OK)


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """When a partition's status turns: the defaults match ``deploy/prometheus/alerts.yml``."""

    lag_seconds_slo: float = 300.0
    retention_risk: float = 0.8


@dataclass(frozen=True, kw_only=True)
class PartitionLag:
    """One consumer group's position on one partition, as of one sample."""

    group: str
    topic: str
    partition: int
    committed: int
    log_start: int
    log_end: int
    lag_seconds: float
    retention_ms: int | None = None  # topic retention.ms; None = unlimited or unknown

    @property
    def lag_messages(self) -> int:
        return max(0, self.log_end - self.committed)

    @property
    def lost_messages(self) -> int:
        return max(0, self.log_start - self.committed)

    @property
    def retention_risk_ratio(self) -> float:
        """How much of the retention allowance the unread backlog has used up (0 = none, 1 = the
        next retention pass deletes unread records, >1 = it already did). The larger of:

        * by time: ``lag_seconds / retention.ms`` -- the oldest unread record's age against the
          topic's time limit;
        * by offsets, once retention is truncating the log (``log_start > 0``): ``lag /
          (log_end - log_start)`` -- the retained span is then what the byte/time limit keeps,
          and the group sitting on its oldest record is next in line for deletion. Before the
          first truncation this ratio says nothing (a fresh topic's reader at offset 0 is not
          at risk) and is left out.
        """
        if self.lost_messages > 0:
            retained = max(1, self.log_end - self.log_start)
            return 1.0 + self.lost_messages / retained
        if self.lag_messages == 0:
            return 0.0
        ratios = [0.0]
        if self.retention_ms is not None and self.retention_ms > 0:
            ratios.append(self.lag_seconds * 1000.0 / self.retention_ms)
        retained = self.log_end - self.log_start
        if self.log_start > 0 and retained > 0:
            ratios.append(self.lag_messages / retained)
        return max(ratios)

    @property
    def retention_headroom_seconds(self) -> float | None:
        """Time before the oldest unread record reaches ``retention.ms`` (negative = past it)."""
        if self.retention_ms is None or self.retention_ms < 0:
            return None
        if self.lag_messages == 0:
            return self.retention_ms / 1000.0
        return self.retention_ms / 1000.0 - self.lag_seconds

    def status(self, thresholds: Thresholds) -> LagStatus:
        if self.lost_messages > 0:
            return LagStatus.LOST
        if self.retention_risk_ratio >= thresholds.retention_risk:
            return LagStatus.AT_RISK
        if self.lag_seconds >= thresholds.lag_seconds_slo:
            return LagStatus.BEHIND
        if self.lag_messages > 0:
            return LagStatus.LAGGING
        return LagStatus.OK


def age_seconds(now_ms: int, record_ts_ms: int | None, lag_messages: int) -> float | None:
    """Lag in seconds from the timestamp of the record at the committed offset.

    0 when caught up (an idle partition is not late, however old its last record); never
    negative (a producer clock ahead of ours clamps to 0); ``None`` when no timestamp was read.
    """
    if lag_messages <= 0:
        return 0.0
    if record_ts_ms is None or record_ts_ms <= 0:
        return None
    return max(0.0, (now_ms - record_ts_ms) / 1000.0)


@dataclass(frozen=True, kw_only=True)
class TopicDepth:
    """Retained records of one topic (the DLQ depth): sum over partitions of end - start, and
    the age of the oldest retained record (R-DLQ-3: "alarm on depth and age"): 0 when empty,
    ``None`` when no retained record's timestamp could be read."""

    topic: str
    messages: int
    oldest_age_seconds: float | None = 0.0
