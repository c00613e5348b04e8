"""One snapshot of the fleet for ``fleet top``: hosts, entities, lag, DLQ, outbox, pools.

Built from the readers the exporter runs, not from copies of them: Kafka positions, the DLQ's
depth and age through :class:`~.sampler.LagSampler` (the same sampler, offset reader and time-lag
method as ``fleet_consumer_lag_seconds``), store figures through :class:`~.store_reader.StoreReader`
(the reads behind ``fleet_held_messages``, ``fleet_quarantined_keys``,
``fleet_outbox_backlog_rows``), here per host and per entity instead of summed.

Hosts come from two places: the stores ``fleet top`` was given (one per host's ``fleet.toml``:
held, in-flight and injecting counts per entity, the host's STALE state as its gateway judges
it) and the roster those stores mirror (every other live host and entity, without counts). The
JSON form (:meth:`FleetSnapshot.as_json`) is the documented ``fleet top --once --json`` schema
(``docs/observability.md``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pipeline.kafka.topics import TopicNames

from .model import PartitionLag, Thresholds, worst
from .sampler import LagSample, LagSampler
from .store_reader import EntityCounts, HostStoreView, StoreReader

log = logging.getLogger(__name__)

SCHEMA = 1
Members = Callable[[Sequence[str]], dict[str, list[str]]]


@dataclass(frozen=True, kw_only=True)
class HostSource:
    """One host whose store ``fleet top`` reads, and the gids its config declares."""

    host: str
    reader: StoreReader
    entities: tuple[tuple[str, str, str], ...] = ()  # (gid, role, delivery)


@dataclass(frozen=True, kw_only=True)
class HostRow:
    host: str
    # "store": its store was read; "roster": seen in a store's roster view; "broker": only its
    # gateway's consumer group is known
    source: str
    stale: bool | None
    why: str
    entities: int
    lag: int | None
    lag_seconds: float | None
    outbox_backlog: int | None
    outbox_oldest_age_s: float | None
    quarantined_keys: int | None
    error: str = ""


@dataclass(frozen=True, kw_only=True)
class EntityRow:
    gid: str
    host: str
    role: str
    delivery: str
    live: bool
    held: int | None  # None: the host's store was not read
    in_flight: int | None
    injecting: int | None


@dataclass(frozen=True, kw_only=True)
class GroupRow:
    group: str
    lag: int
    lag_seconds: float
    status: str


@dataclass(frozen=True, kw_only=True)
class PoolRow:
    pool: str
    group: str
    members: list[str]
    lag: int


@dataclass(frozen=True, kw_only=True)
class DlqRow:
    topic: str
    depth: int
    oldest_age_s: float | None


@dataclass(frozen=True, kw_only=True)
class FleetSnapshot:
    taken_at: float
    broker_ok: bool
    hosts: list[HostRow] = field(default_factory=list)
    entities: list[EntityRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    pools: list[PoolRow] = field(default_factory=list)
    dlq: DlqRow | None = None
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


class FleetReaders:
    """Everything ``fleet top`` reads, kept across refreshes (the sampler's caches and rate
    history, the stores' engines); :meth:`snapshot` reads them all once."""

    def __init__(
        self,
        *,
        sampler: LagSampler | None,
        hosts: Sequence[HostSource] = (),
        topics: TopicNames | None = None,
        members: Members | None = None,
        thresholds: Thresholds | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sampler = sampler
        self._hosts = list(hosts)
        self._topics = topics or TopicNames()
        self._members = members
        self._thresholds = thresholds or Thresholds()
        self._clock = clock

    def snapshot(self) -> FleetSnapshot:
        errors: list[str] = []
        sample = self._sampler.sample() if self._sampler is not None else None
        if sample is not None:
            errors.extend(sample.errors)
        now = self._clock()
        views: dict[str, HostStoreView | str] = {}
        for src in self._hosts:
            try:
                views[src.host] = src.reader.host_view(int(now * 1000))
            except Exception as exc:  # noqa: BLE001 - one unreadable store must not blank the view
                log.warning("store of %s unreadable: %s", src.host, exc)
                views[src.host] = f"store: {exc}"
                errors.append(f"{src.host}: store: {exc}")
        groups = self._groups(sample)
        entities = self._entities(views)
        return FleetSnapshot(
            taken_at=now,
            broker_ok=sample.broker_ok if sample is not None else False,
            hosts=self._host_rows(views, entities, groups, now),
            entities=entities,
            groups=groups,
            pools=self._pools(sample, groups, errors),
            dlq=_dlq(sample),
            errors=errors,
        )

    def _entities(self, views: dict[str, HostStoreView | str]) -> list[EntityRow]:
        rows: dict[str, EntityRow] = {}
        for view in views.values():
            if isinstance(view, str):
                continue
            for e in view.roster:
                rows.setdefault(e.gid, _row(e.gid, e.host, e.role, e.delivery, live=True))
        for src in self._hosts:
            for gid, role, delivery in src.entities:
                rows.setdefault(gid, _row(gid, src.host, role, delivery, live=False))
        read = {h: v for h, v in views.items() if not isinstance(v, str)}
        out = []
        for row in rows.values():
            seen = read.get(row.host)
            counts = seen.counts.get(row.gid, EntityCounts()) if seen is not None else None
            out.append(row if counts is None else replace(
                row, held=counts.held, in_flight=counts.in_flight, injecting=counts.injecting
            ))  # fmt: skip
        return sorted(out, key=lambda r: (r.host, r.gid))

    def _host_rows(
        self,
        views: dict[str, HostStoreView | str],
        entities: list[EntityRow],
        groups: list[GroupRow],
        now: float,
    ) -> list[HostRow]:
        by_group = {g.group: g for g in groups}
        gateway = self._topics.gateway_group("x")[:-1]  # "<prefix>gw."
        from_groups = {g.group[len(gateway) :] for g in groups if g.group.startswith(gateway)}
        names = sorted(set(views) | {e.host for e in entities} | from_groups)
        rows = []
        for host in names:
            view = views.get(host)
            lag = by_group.get(self._topics.gateway_group(host))
            common: dict[str, Any] = {
                "host": host,
                "entities": sum(1 for e in entities if e.host == host),
                "lag": lag.lag if lag else None,
                "lag_seconds": lag.lag_seconds if lag else None,
            }
            if isinstance(view, HostStoreView):
                oldest = view.outbox_oldest_created_at
                rows.append(
                    HostRow(
                        **common, source="store", stale=view.stale, why=view.why,
                        outbox_backlog=view.outbox_backlog,
                        outbox_oldest_age_s=None if oldest is None else max(0.0, now - oldest),
                        quarantined_keys=view.quarantined_keys,
                    )
                )  # fmt: skip
            else:
                seen = any(e.host == host for e in entities)
                source = "store" if view else ("roster" if seen else "broker")
                rows.append(
                    HostRow(
                        **common, source=source, stale=None, why="",
                        outbox_backlog=None, outbox_oldest_age_s=None, quarantined_keys=None,
                        error=view or "",
                    )
                )  # fmt: skip
        return rows

    def _groups(self, sample: LagSample | None) -> list[GroupRow]:
        if sample is None:
            return []
        by: dict[str, list[PartitionLag]] = {}
        for p in sample.partitions:
            by.setdefault(p.group, []).append(p)
        return [
            GroupRow(
                group=g,
                lag=sum(p.lag_messages for p in parts),
                lag_seconds=max(p.lag_seconds for p in parts),
                status=worst([p.status(self._thresholds) for p in parts]).value,
            )
            for g, parts in sorted(by.items())
        ]

    def _pools(
        self, sample: LagSample | None, groups: list[GroupRow], errors: list[str]
    ) -> list[PoolRow]:
        if sample is None:
            return []
        prefix = self._topics.pool_group("x")[:-1]
        pool_groups = [g for g in sample.groups if g.startswith(prefix)]
        members: dict[str, list[str]] = {}
        if self._members is not None and pool_groups:
            try:
                members = self._members(pool_groups)
            except Exception as exc:  # noqa: BLE001 - members are one column of many
                errors.append(f"pool members: {exc}")
        lag = {g.group: g.lag for g in groups}
        return [
            PoolRow(pool=g[len(prefix) :], group=g, members=members.get(g, []), lag=lag.get(g, 0))
            for g in pool_groups
        ]


def _row(gid: str, host: str, role: str, delivery: str, *, live: bool) -> EntityRow:
    return EntityRow(
        gid=gid, host=host, role=str(role), delivery=str(delivery), live=live,
        held=None, in_flight=None, injecting=None,
    )  # fmt: skip


def _dlq(sample: LagSample | None) -> DlqRow | None:
    if sample is None or sample.dlq is None:
        return None
    d = sample.dlq
    return DlqRow(topic=d.topic, depth=d.messages, oldest_age_s=d.oldest_age_seconds)


__all__ = [
    "SCHEMA",
    "DlqRow",
    "EntityRow",
    "FleetReaders",
    "FleetSnapshot",
    "GroupRow",
    "HostRow",
    "HostSource",
    "PoolRow",
]
