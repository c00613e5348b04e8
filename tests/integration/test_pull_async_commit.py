"""The pull path's asynchronous offset commit on the real broker.

R-ACK-7 / R-ACK-2 (pull path, at-least-once): the gateway's inbox commits a pull
batch's offsets asynchronously once its held and dedupe rows are durable. When those commits
are lost (a crash before the broker answered), the whole window is redelivered and the dedupe
rows absorb it: no message is held twice, none is lost.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select

from pipeline.envelope import (
    Envelope,
    Kind,
    Signer,
    TrustStore,
    encode,
)
from pipeline.host.held import held_table
from pipeline.kafka.clients import new_consumer
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, pull_inbox, unique_name

pytestmark = pytest.mark.kafka

N = 60
MAINS = ("m-0", "m-1", "m-2")


class _Spy:
    """The real consumer, with a log of how each commit was asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.modes: list[str] = []

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        self.modes.append("async" if kwargs.get("asynchronous", True) else "sync")
        return self.inner.commit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _inbox_runtime(
    bootstrap: str, topics: TopicNames, trust: TrustStore, engine: Any, group: str, spy: list[Any]
) -> tuple[ConsumerRuntime, CollectorRegistry]:
    """The gateway's inbox for pull mains, verifying on 2 threads, as a fresh process would
    (nothing remembered in memory)."""
    inbox = pull_inbox(
        engine,
        host="b",
        topics=topics,
        trust=trust,
        mains=MAINS,
        senders={"w-a": "a"},
        verify_threads=2,
    )

    def factory(conf: dict[str, Any]) -> Any:
        spy.append(_Spy(new_consumer(conf)))
        return spy[-1]

    registry = CollectorRegistry()
    runtime = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=group, topics=(topics.inbox("b"),)),
        handler=inbox.handler,
        sessions=session_factory(engine),
        dead_letters=inbox.dead_letters,
        metrics=RuntimeMetrics(registry),
        consumer_factory=factory,
    )
    return runtime, registry


def _held_counts(engine: Any) -> tuple[int, int]:
    with engine.connect() as c:
        total = c.execute(select(func.count()).select_from(held_table)).scalar_one()
        distinct = c.execute(select(func.count(func.distinct(held_table.c.msg_id)))).scalar_one()
    return int(total), int(distinct)


def test_lost_async_commits_redeliver_a_window_that_dedupe_absorbs(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    topics = TopicNames(prefix=unique_name("test.pullac") + ".")
    apply_topology(kafka.bootstrap, TopologySpec(hosts=("b",), topics=topics, inbox_partitions=3))
    a = Signer.generate("a")
    trust = TrustStore()
    trust.add("a", a.key_id, a.public_key_bytes)
    inbox = topics.inbox("b")
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(N):
        env = Envelope.new(kind=Kind.REPLY, sender="w-a", to=MAINS[i % 3], body=b"r", ttl_s=600)
        key, headers, value = encode(env, topic=inbox, signer=a)
        producer.produce(inbox, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    engine = make_engine(f"sqlite:///{tmp_path / 'b.sqlite'}")
    group = unique_name("test.pullac.gw")

    spies: list[Any] = []
    first, _ = _inbox_runtime(kafka.bootstrap, topics, trust, engine, group, spies)
    first.subscribe()
    deadline = time.monotonic() + 60
    while _held_counts(engine)[0] < N:
        assert time.monotonic() < deadline, _held_counts(engine)
        first.step()
    assert spies[0].modes and set(spies[0].modes) == {"async"}, "pull batches commit async"
    spies[0].inner.close()  # a crash: no flush of the async commits, the member leaves

    # ... and every one of those async commits was lost
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    reset = [TopicPartition(inbox, p, 0) for p in range(3)]
    deadline = time.monotonic() + 60
    while True:  # the group is empty once the coordinator processed the leave
        try:
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, reset)])[
                group
            ].result(10)
            break
        except KafkaException:  # GROUP_NOT_EMPTY until the leave is through
            assert time.monotonic() < deadline
            time.sleep(0.5)

    second, registry = _inbox_runtime(kafka.bootstrap, topics, trust, engine, group, spies)
    second.subscribe()
    deadline = time.monotonic() + 60
    hits = 0.0
    try:
        while hits < N:
            assert time.monotonic() < deadline, hits
            second.step()
            hits = registry.get_sample_value("fleet_dedupe_hits_total", {"group": group}) or 0.0
    finally:
        second.close()
    assert _held_counts(engine) == (N, N), "every message held exactly once"
    engine.dispose()
