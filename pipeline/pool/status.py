"""``fleet pool status``: members and their assignment (DescribeConsumerGroups), committed
offset, log end and lag per partition through the project's lag reader; with the members' store,
each member's in-flight steps (the lanes rows its heartbeat writes, :mod:`.heartbeat`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from pipeline.errors import BrokerError
from pipeline.kafka.clients import ClientFactory, new_admin
from pipeline.kafka.settings import admin_config
from pipeline.kafka.topics import TopicNames
from pipeline.observability.kafka_reader import KafkaOffsetReader
from pipeline.store import make_engine, read_sessions

from .heartbeat import MemberLanes, member_lanes


@dataclass(frozen=True, kw_only=True)
class PartitionRow:
    partition: int
    member: str | None
    committed: int | None
    log_end: int
    lag: int


@dataclass(kw_only=True)
class PoolStatus:
    pool: str
    group: str
    topic: str
    state: str
    assignor: str
    members: dict[str, list[int]] = field(default_factory=dict)
    partitions: list[PartitionRow] = field(default_factory=list)
    lanes: dict[str, MemberLanes] = field(default_factory=dict)  # by member name

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"total_lag": self.total_lag}


def pool_status(
    bootstrap: str,
    pool: str,
    *,
    topics: TopicNames | None = None,
    store_url: str | None = None,
    admin_factory: ClientFactory = new_admin,
) -> PoolStatus:
    """``store_url``: also read the members' lanes rows (in-flight steps per member)."""
    names = topics or TopicNames()
    topic, group = names.pool(pool), names.pool_group(pool)
    admin = admin_factory(admin_config(bootstrap))
    try:
        (fut,) = admin.describe_consumer_groups([group], request_timeout=10).values()
        desc = fut.result(timeout=15)
    except (KafkaException, TimeoutError) as exc:
        raise BrokerError(f"describing group {group} failed: {exc}") from exc
    members: dict[str, list[int]] = {}
    owner: dict[int, str] = {}
    for m in desc.members:
        name = str(m.group_instance_id or m.client_id or m.member_id)
        if name in members:  # two dynamic members with the same client id
            name = f"{name}/{m.member_id[-6:]}"
        parts = sorted(
            tp.partition for tp in (m.assignment.topic_partitions or []) if tp.topic == topic
        )
        members[name] = parts
        owner.update((p, name) for p in parts)
    reader = KafkaOffsetReader(bootstrap)
    try:
        parts = reader.partitions_of(topic)
        ends = reader.watermarks([(topic, p) for p in parts])
        committed = reader.committed_offsets([group]).get(group, {})
    finally:
        reader.close()
    rows = []
    for p in parts:
        end = ends.get((topic, p), (0, 0))[1]
        done = committed.get((topic, p))
        start = ends.get((topic, p), (0, 0))[0]
        rows.append(
            PartitionRow(
                partition=p,
                member=owner.get(p),
                committed=done,
                log_end=end,
                lag=end - (done if done is not None else start),
            )
        )
    return PoolStatus(
        pool=pool,
        group=group,
        topic=topic,
        state=str(getattr(desc.state, "name", desc.state)),
        assignor=str(desc.partition_assignor or ""),
        members=members,
        partitions=rows,
        lanes=_lanes(store_url, pool) if store_url else {},
    )


def _lanes(store_url: str, pool: str) -> dict[str, MemberLanes]:
    engine = make_engine(store_url)
    try:
        with read_sessions(engine)() as session:
            return {m.member: m for m in member_lanes(session, pool)}
    finally:
        engine.dispose()
