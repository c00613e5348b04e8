"""Retry attempts per record, carried to a partition's next owner in the commit's metadata.

While this member owns a partition, a retried record's attempts are counted here; the batch
commit writes them as the blocked offset's metadata (:mod:`pipeline.runtime.retry_marks`), and
a member assigned the partition next continues the count instead of starting it again.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet

from confluent_kafka import TopicPartition

from pipeline.record import Record

from . import retry_marks
from .batch import Batch
from .context import Tries
from .lanes import TP

log = logging.getLogger(__name__)


class Attempts:
    """The failed attempts of each record still being retried, keyed by (topic, partition,
    offset)."""

    def __init__(self) -> None:
        self._attempts: dict[tuple[str, int, int], Tries] = {}

    def __bool__(self) -> bool:
        """Whether any record is still being retried (none: no record has attempts to settle)."""
        return bool(self._attempts)

    def failed(self, rec: Record, now: int) -> int:
        """One more failed attempt of ``rec``; returns its attempt number."""
        akey = (rec.topic, rec.partition, rec.offset)
        att = self._attempts.get(akey) or Tries(
            attempts=0, first_failure_ms=now, last_failure_ms=now
        )
        att["attempts"] += 1
        att["last_failure_ms"] = now
        self._attempts[akey] = att
        return att["attempts"]

    def settled(self, rec: Record) -> Tries | None:
        """``rec`` is applied or given up: its attempts so far (None if it never failed)."""
        return (
            self._attempts.pop((rec.topic, rec.partition, rec.offset), None)
            if self._attempts
            else None
        )

    def retry_marks(self, batch: Batch) -> tuple[dict[TP, int], dict[TP, str]]:
        """The batch's offsets, and for each partition blocked by a retried record that record's
        attempts as the commit's metadata (:mod:`pipeline.runtime.retry_marks`): a member that
        is assigned the partition next continues the count instead of starting it again."""
        offsets, marks = dict(batch.next_offset), {}
        for tp, (at, _delay) in batch.blocked.items():
            tries = self._attempts.get((*tp, at))
            if tries is not None:
                offsets[tp] = min(offsets.get(tp, at), at)
                marks[tp] = retry_marks.encode(at, tries)
        return offsets, marks

    def continue_retries(self, committed: list[TopicPartition]) -> None:
        """At assignment: the attempts a previous owner committed for a retried record."""
        for tp in committed:
            got = retry_marks.decode(getattr(tp, "metadata", None))
            if got is not None and tp.offset >= 0:
                at, tries = got
                key = (tp.topic, tp.partition, at)
                mine = self._attempts.get(key)
                if mine is None or mine["attempts"] < tries["attempts"]:
                    self._attempts[key] = tries
                    log.info(
                        "%s[%d] offset %d: continuing its retries after %d attempt(s) elsewhere",
                        tp.topic, tp.partition, at, tries["attempts"],
                    )  # fmt: skip

    def forget(self, gone: AbstractSet[TP]) -> None:
        """The partitions moved away: their records' counts go with them (in the commits)."""
        self._attempts = {k: v for k, v in self._attempts.items() if (k[0], k[1]) not in gone}
