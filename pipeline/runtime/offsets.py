"""A committed offset that fell off retention fails loudly (R-FAIL-7).

With ``auto.offset.reset=latest`` a group that was down longer than the topic's retention skips
to the end without a word: work is lost silently. Our consumers run with
``OffsetReset.ERROR`` (``pipeline.kafka.settings``), so librdkafka reports the condition as a
consumer error; :func:`raise_if_offsets_lost` turns it into an :class:`OffsetsLostError` naming
group, topic, partition, committed offset, log-start offset and how many offsets were lost.
:func:`find_lost_offsets` performs the same check up front, and :func:`assign_from_committed`
is an on-assign callback that does it and starts a partition the group never committed at the
beginning -- with ``auto.offset.reset=error`` librdkafka would otherwise refuse a brand-new group
too.
Recovery is a deliberate operator act (reset the group to the log start, let dedupe absorb the
replay), never an automatic skip.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from pipeline.errors import OffsetsLostError
from pipeline.reasons import Failure

OFFSETS_LOST = Failure.OFFSETS_LOST


@dataclass(frozen=True, kw_only=True)
class LostRange:
    group: str
    topic: str
    partition: int
    committed: int
    log_start: int
    log_end: int

    @property
    def lost(self) -> int:
        """Offsets deleted before this group read them (0 when the commit is past the end)."""
        return max(0, self.log_start - self.committed)


def lost_error(lost: LostRange) -> OffsetsLostError:
    """The loud error for ``lost``: names the group, the partition and how much is gone."""
    if lost.committed > lost.log_end:
        what = f"is past the log end {lost.log_end} (topic recreated or truncated?)"
    else:
        what = f"fell off retention: {lost.lost} offset(s) lost before log start {lost.log_start}"
    return OffsetsLostError(
        f"group {lost.group!r} {lost.topic}[{lost.partition}]: committed offset "
        f"{lost.committed} {what}",
        lost=lost,
        context={
            "group": lost.group,
            "topic": lost.topic,
            "partition": lost.partition,
            "committed": lost.committed,
            "log_start": lost.log_start,
            "log_end": lost.log_end,
            "lost": lost.lost,
        },
    )


def _range(
    consumer: Consumer, group: str, topic: str, partition: int, timeout_s: float
) -> LostRange:
    tp = TopicPartition(topic, partition)
    committed = consumer.committed([tp], timeout=timeout_s)[0].offset
    low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
    return LostRange(
        group=group,
        topic=topic,
        partition=partition,
        committed=committed,
        log_start=low,
        log_end=high,
    )


def raise_if_offsets_lost(
    consumer: Consumer, msg: Any, group: str, *, timeout_s: float = 10.0
) -> None:
    """Call on every polled message: raises :class:`OffsetsLostError` for an offset-reset error."""
    if msg is None:
        return
    err = msg.error()
    if err is None or err.code() != KafkaError._AUTO_OFFSET_RESET:
        return
    topic, partition = msg.topic(), msg.partition()
    lost = _range(consumer, group, topic, partition, timeout_s)
    if lost.committed < 0:  # no commit known: report the position librdkafka tried instead
        lost = LostRange(
            group=group,
            topic=topic,
            partition=partition,
            committed=int(msg.offset()),
            log_start=lost.log_start,
            log_end=lost.log_end,
        )
    raise lost_error(lost)


def find_lost_offsets(
    consumer: Consumer,
    group: str,
    partitions: Iterable[TopicPartition],
    *,
    timeout_s: float = 10.0,
) -> list[LostRange]:
    """Partitions whose committed offset lies outside [log start, log end]; for on-assign checks.

    A partition the group never committed is not "lost" (the reset policy decides its start).
    """
    out: list[LostRange] = []
    for tp in partitions:
        rng = _range(consumer, group, tp.topic, tp.partition, timeout_s)
        if rng.committed >= 0 and not rng.log_start <= rng.committed <= rng.log_end:
            out.append(rng)
    return out


def assign_from_committed(
    consumer: Consumer, partitions: list[TopicPartition], group: str, *, timeout_s: float = 10.0
) -> None:
    """On-assign callback body for ``OffsetReset.ERROR`` consumers (cooperative-sticky).

    Never committed -> start at the log start (a new group reads everything); committed and
    still on the broker -> resume there; committed but deleted -> :class:`OffsetsLostError`
    (raised out of ``poll``). Use as ``on_assign=lambda c, ps: assign_from_committed(c, ps, g)``.
    """
    lost = find_lost_offsets(consumer, group, partitions, timeout_s=timeout_s)
    if lost:
        raise lost_error(lost[0])
    committed = consumer.committed(partitions, timeout=timeout_s)
    for tp, cm in zip(partitions, committed, strict=True):
        tp.offset = OFFSET_BEGINNING if cm.offset < 0 else cm.offset
    consumer.incremental_assign(partitions)
