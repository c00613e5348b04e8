"""The lag sampler: one batched read of the fleet's positions per cycle, cached for scrapes.

Upholds R-OBS-2 "slowness shows up as lag, not errors; alert per partition and on its trend"
and R-OBS-4 "the exporter must warn *before* lag reaches retention". A scrape never calls the
broker: it reads :attr:`LagSampler.latest`, refreshed by the exporter's sampler thread (or one
:meth:`LagSampler.sample` call in ``fleet lag``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.errors import FleetError
from pipeline.kafka.topics import TopicNames

from .drain import GroupDrain, Positions, group_drains, positions
from .model import PartitionLag, TopicDepth, age_seconds
from .ports import OffsetReader, StoreGauges, TopicPartitionKey

log = logging.getLogger(__name__)
_DLQ_OLDEST = "\0dlq-oldest"  # not a valid group id: never collides with a real group

Clock = Callable[[], float]  # wall-clock seconds (record timestamps are wall-clock ms)


@dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    groups_prefix: str = TopicNames().prefix
    dlq_topic: str | None = TopicNames().dlq
    interval_s: float = 15.0
    retention_refresh_s: float = 300.0
    # consume and arrival rates (for the drain time) are measured over about this window
    rate_window_s: float = 60.0


@dataclass(frozen=True, kw_only=True)
class StoreSample:
    held_messages: int
    quarantined_keys: int
    outbox_backlog: int
    oldest_unsent_age_seconds: float


@dataclass(frozen=True, kw_only=True)
class LagSample:
    """Everything one cycle read; immutable so a scrape never sees a half-built sample."""

    taken_at: float
    duration_s: float
    partitions: tuple[PartitionLag, ...] = ()
    groups: tuple[str, ...] = ()
    dlq: TopicDepth | None = None
    store: StoreSample | None = None
    errors: tuple[str, ...] = ()
    broker_ok: bool = True
    drains: tuple[GroupDrain, ...] = ()  # per group: lag, rates, time to drain


@dataclass
class _Caches:
    # The record at (topic, partition, offset) never changes: its timestamp is read once.
    timestamps: dict[tuple[str, int, int], int] = field(default_factory=dict)
    # (group, topic, partition, committed) -> wall time we first saw it lagging: the fallback
    # lower bound when no record could be read at that offset (e.g. only txn markers there).
    first_seen: dict[tuple[str, str, int, int], float] = field(default_factory=dict)
    retention: dict[str, int | None] = field(default_factory=dict)
    retention_at: float = 0.0


class LagSampler:
    """Reads group positions through an :class:`OffsetReader`; keeps the latest sample."""

    def __init__(
        self,
        reader: OffsetReader,
        config: SamplerConfig,
        *,
        store: StoreGauges | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._reader = reader
        self._config = config
        self._store = store
        self._clock = clock
        self._caches = _Caches()
        self._lock = threading.Lock()
        self._latest: LagSample | None = None
        self._history: deque[tuple[float, Positions]] = deque()
        self.cycles = 0

    @property
    def latest(self) -> LagSample | None:
        with self._lock:
            return self._latest

    def sample(self) -> LagSample:
        started = time.monotonic()
        errors: list[str] = []
        try:
            partitions, groups, dlq = self._read_kafka()
            drains = self._drains(partitions)
            broker_ok = True
        except FleetError as exc:
            log.warning("lag sample failed: %s", exc)
            errors.append(str(exc))
            # keep the last known positions (marked by broker_ok=False) so a broker blip does
            # not reset every lag alert's `for:` clock; fleet_exporter_broker_up says it is stale
            previous = self.latest
            partitions = previous.partitions if previous else ()
            groups = previous.groups if previous else ()
            dlq = previous.dlq if previous else None
            drains = previous.drains if previous else ()
            broker_ok = False
        store = self._read_store(errors)
        result = LagSample(
            taken_at=self._clock(),
            duration_s=time.monotonic() - started,
            partitions=partitions,
            groups=groups,
            dlq=dlq,
            store=store,
            errors=tuple(errors),
            broker_ok=broker_ok,
            drains=drains,
        )
        with self._lock:
            self._latest = result
            self.cycles += 1
        return result

    def _drains(self, rows: tuple[PartitionLag, ...]) -> tuple[GroupDrain, ...]:
        """Rates since the newest earlier sample at least ``rate_window_s`` old (or the oldest
        one kept, while the sampler is younger than the window)."""
        now = self._clock()
        window = self._config.rate_window_s
        while len(self._history) > 1 and self._history[1][0] <= now - window:
            self._history.popleft()
        before = self._history[0] if self._history else None
        self._history.append((now, positions(rows)))
        if before is None:
            return group_drains(rows, before=None, seconds=0.0)
        return group_drains(rows, before=before[1], seconds=now - before[0])

    def _read_kafka(self) -> tuple[tuple[PartitionLag, ...], tuple[str, ...], TopicDepth | None]:
        groups = self._reader.list_groups(self._config.groups_prefix)
        committed = self._reader.committed_offsets(groups)
        wanted: set[TopicPartitionKey] = {tp for offs in committed.values() for tp in offs}
        dlq_parts: list[TopicPartitionKey] = []
        if self._config.dlq_topic:
            dlq_parts = [(self._config.dlq_topic, p) for p in self._dlq_partitions()]
        marks = self._reader.watermarks(wanted | set(dlq_parts))
        retention = self._retention({t for t, _ in wanted})
        now = self._clock()
        # the DLQ's oldest retained record, timed like a group sitting at the log start (the
        # key cannot be a group id: one fetch round and the same timestamp cache serve both)
        dlq_oldest = {k: marks[k][0] for k in dlq_parts if k in marks and marks[k][1] > marks[k][0]}
        stamps, markers_only = self._timestamps({**committed, _DLQ_OLDEST: dlq_oldest}, marks)
        rows: list[PartitionLag] = []
        seen: set[tuple[str, str, int, int]] = set()
        for group in sorted(committed):
            for (topic, part), offset in sorted(committed[group].items()):
                if (topic, part) not in marks:
                    continue  # topic deleted since the commit: nothing left to lag behind
                start, end = marks[(topic, part)]
                lag = max(0, end - offset)
                seconds = age_seconds(int(now * 1000), stamps.get((topic, part, offset)), lag)
                if (topic, part, max(offset, start)) in markers_only:
                    seconds = 0.0  # only transaction markers unread: nothing is waiting
                if seconds is None:
                    key = (group, topic, part, offset)
                    seen.add(key)
                    seconds = now - self._caches.first_seen.setdefault(key, now)
                rows.append(
                    PartitionLag(
                        group=group,
                        topic=topic,
                        partition=part,
                        committed=offset,
                        log_start=start,
                        log_end=end,
                        lag_seconds=seconds,
                        retention_ms=retention.get(topic),
                    )
                )
        self._caches.first_seen = {k: v for k, v in self._caches.first_seen.items() if k in seen}
        dlq = None
        if self._config.dlq_topic and dlq_parts:
            depth = sum(marks[k][1] - marks[k][0] for k in dlq_parts if k in marks)
            read = [stamps.get((t, p, o)) for (t, p), o in dlq_oldest.items()]
            known = [ts for ts in read if ts is not None]
            age = max(0.0, now - min(known) / 1000.0) if known else (None if depth else 0.0)
            dlq = TopicDepth(topic=self._config.dlq_topic, messages=depth, oldest_age_seconds=age)
        return tuple(rows), tuple(groups), dlq

    def _timestamps(
        self,
        committed: dict[str, dict[TopicPartitionKey, int]],
        marks: dict[TopicPartitionKey, tuple[int, int]],
    ) -> tuple[dict[tuple[str, int, int], int], set[tuple[str, int, int]]]:
        """Timestamps at every lagging committed offset; only offsets not read before are fetched.

        Several groups on one partition at different offsets need different records: the
        uncached ones are fetched in rounds of one offset per partition (usually one round).
        Also returns the offsets followed by transaction markers only (never cached: a data
        record may be appended after them at any time)."""
        markers_only: set[tuple[str, int, int]] = set()
        needed: set[tuple[str, int, int]] = set()
        for offs in committed.values():
            for (topic, part), offset in offs.items():
                if (topic, part) in marks and offset < marks[(topic, part)][1]:
                    needed.add((topic, part, max(offset, marks[(topic, part)][0])))
        missing = sorted(k for k in needed if k not in self._caches.timestamps)
        while missing:
            batch: dict[TopicPartitionKey, int] = {}
            rest: list[tuple[str, int, int]] = []
            for t, p, o in missing:
                if (t, p) in batch:
                    rest.append((t, p, o))
                else:
                    batch[(t, p)] = o
            for (t, p), ts in self._reader.record_timestamps(batch).items():
                if ts is None:
                    markers_only.add((t, p, batch[(t, p)]))
                else:
                    self._caches.timestamps[(t, p, batch[(t, p)])] = ts
            missing = rest
        self._caches.timestamps = {k: v for k, v in self._caches.timestamps.items() if k in needed}
        out = dict(self._caches.timestamps)
        # a group below the log start is timed by the oldest retained record (a lower bound)
        for offs in committed.values():
            for (topic, part), offset in offs.items():
                if (topic, part) in marks and offset < marks[(topic, part)][0]:
                    oldest = out.get((topic, part, marks[(topic, part)][0]))
                    if oldest is not None:
                        out[(topic, part, offset)] = oldest
        return out, markers_only

    def _dlq_partitions(self) -> list[int]:
        assert self._config.dlq_topic is not None
        return self._reader.partitions_of(self._config.dlq_topic)

    def _retention(self, topics: set[str]) -> dict[str, int | None]:
        now = time.monotonic()
        stale = now - self._caches.retention_at > self._config.retention_refresh_s
        new = topics - set(self._caches.retention)
        if stale:
            self._caches.retention = self._reader.retention_ms(topics)
            self._caches.retention_at = now
        elif new:
            self._caches.retention.update(self._reader.retention_ms(new))
        return self._caches.retention

    def _read_store(self, errors: list[str]) -> StoreSample | None:
        if self._store is None:
            return None
        try:
            return StoreSample(
                held_messages=self._store.held_messages(),
                quarantined_keys=self._store.quarantined_keys(),
                outbox_backlog=self._store.outbox_backlog(),
                oldest_unsent_age_seconds=self._store.oldest_unsent_age_seconds(),
            )
        except Exception as exc:  # noqa: BLE001 - a broken store must not stop lag export
            log.warning("store gauges failed: %s", exc)
            errors.append(f"store: {exc}")
            return None
