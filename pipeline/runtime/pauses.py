"""Retries without blocking ``poll``: a blocked partition is paused until its delay is over.

Without a worker pool the partition is also sought back to the blocked record, so it is re-read
when resumed; in a worker pool its records wait in memory instead (``inflight.hold_back``).
``poll`` goes on meanwhile, so ``max.poll.interval.ms`` is never blown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Set as AbstractSet
from typing import Any

from confluent_kafka import TopicPartition

from .batch import Batch
from .config import RuntimeConfig
from .inflight import Dispatcher
from .lanes import TP
from .metrics import RuntimeMetrics

log = logging.getLogger(__name__)


class Pauses:
    """The partitions paused for a retry or a backoff, each with the time it resumes."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        inflight: Dispatcher | None,
        metrics: RuntimeMetrics | None,
    ) -> None:
        self.config = config
        self.inflight = inflight
        self.metrics = metrics
        self.paused: dict[TP, float] = {}
        # the gauge's child, looked up once; set only when the count changes (each batch asks)
        self._gauge = metrics.paused_partitions.labels(config.group_id) if metrics else None
        self._shown = -1

    def schedule(self, consumer: Any, batch: Batch) -> None:
        """Pause each partition the batch left blocked, until its retry's delay is over."""
        now = time.monotonic()
        for (topic, partition), (blocked_at, delay) in batch.blocked.items():
            try:
                if self.inflight is None:  # re-read the partition from the blocked record
                    consumer.seek(TopicPartition(topic, partition, blocked_at))
                consumer.pause([TopicPartition(topic, partition)])
            except Exception:  # noqa: BLE001 - a revoked partition: the new owner re-reads it
                log.info("could not pause %s[%s] (revoked?)", topic, partition)
                continue
            if self.inflight is not None:  # inflight: its records wait in memory, no re-read
                self.inflight.hold_back((topic, partition), blocked_at, batch.records)
            self.paused[(topic, partition)] = now + delay
        self._show()

    def _show(self) -> None:
        if self._gauge is not None and len(self.paused) != self._shown:
            self._shown = len(self.paused)
            self._gauge.set(self._shown)

    def back_off(self, consumer: Any, batch: Batch, *, releasing: str | None) -> None:
        """Re-read the whole batch after a backoff (a release is simply tried again later)."""
        if releasing is not None:
            return
        batch.blocked.clear()
        for tp, offset in batch.first_offset.items():
            batch.blocked[tp] = (offset, self.config.retry.delay_for(1))
        self.schedule(consumer, batch)

    def resume_due(self, consumer: Any) -> None:
        if not self.paused:
            return
        now = time.monotonic()
        due = [tp for tp, until in self.paused.items() if until <= now]
        if due:
            if self.inflight is not None:  # held-back records first, then what is fetched next
                for tp in due:
                    self.inflight.release(tp)
            consumer.resume([TopicPartition(t, p) for t, p in due])
            for tp in due:
                del self.paused[tp]
            self._show()

    def forget(self, gone: AbstractSet[TP]) -> None:
        for tp in gone:
            self.paused.pop(tp, None)
