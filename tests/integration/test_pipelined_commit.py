"""A pipelined commit on the real broker (``RuntimeConfig.pipelined_commit``, the gateway's inbox).

R-ACK-3 (forward path, at most once: commit before inject): the runtime sends an at-most-once
batch's offsets asynchronously and goes on with the next batches; each inject runs only once a
commit covering its record is confirmed. Here every inject looks at the broker's answers the
client had served by then (librdkafka's ``on_commit``): one must confirm an offset past its
record. (Asking the broker for the committed offset would not tell: that request queues behind
the commit on the same connection, so it sees the commit even when the inject did not wait.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pipeline.kafka.clients import new_consumer
from pipeline.kafka.settings import producer_config
from pipeline.record import Record
from pipeline.runtime import ConsumerRuntime, RuntimeConfig, Staged
from pipeline.runtime.outcomes import ACK, Outcome
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name
from tests.conftest import TopicFactory
from tests.unit.test_runtime import ListSink

pytestmark = pytest.mark.kafka

N = 40
_md = MetaData()
_rows = Table("rows", _md, Column("id", Integer, primary_key=True), Column("v", String))


class _Briefs:
    """Every even record is a brief (an inject after the commit), every odd one a REPLY."""

    def __init__(self) -> None:
        self.injected: list[tuple[int, int, int]] = []  # (partition, offset, confirmed then)
        self.confirmed: dict[int, int] = {}  # partition -> highest offset a served answer confirmed

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        for tp in partitions or []:
            if err is None and tp.error is None:
                self.confirmed[tp.partition] = max(tp.offset, self.confirmed.get(tp.partition, -1))

    def handle(self, record: Record, tx: Staged) -> Outcome:
        tx.insert(_rows, {"v": f"{record.partition}:{record.offset}"})
        if int(record.value or b"0") % 2 == 0:
            tx.after_commit(lambda: self._inject(record))
        return ACK

    def _inject(self, record: Record) -> None:
        confirmed = self.confirmed.get(record.partition, -1)
        self.injected.append((record.partition, record.offset, confirmed))


def _count(engine: Any) -> int:
    with engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(_rows)).scalar_one())


def test_every_inject_runs_after_the_broker_holds_its_offset(
    kafka: BrokerHandle, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic("pipelined", partitions=2)
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(N):
        producer.produce(topic, key=f"k{i % 4}".encode(), value=str(i).encode(),
                         headers=[("msgId", f"m{i}".encode())])  # fmt: skip
    assert producer.flush(30) == 0
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    _md.create_all(engine)
    handler = _Briefs()

    def consumer(conf: dict[str, Any]) -> Any:
        runtime_callback = conf["on_commit"]

        def on_commit(err: Any, partitions: list[TopicPartition]) -> None:
            handler.on_commit(err, partitions)  # seen first, as the runtime sees it
            runtime_callback(err, partitions)

        return new_consumer({**conf, "on_commit": on_commit})

    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=kafka.bootstrap,
            group_id=unique_name("test.pipelined.g"),
            topics=(topic,),
            pipelined_commit=True,
            batch_size=3,
        ),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=ListSink(),
        consumer_factory=consumer,
    )
    runtime.subscribe()
    deadline = time.monotonic() + 60
    try:
        while len(handler.injected) < N // 2 or _count(engine) < N:
            assert time.monotonic() < deadline, handler.injected
            runtime.step()
    finally:
        runtime.close()
    assert runtime.batches >= N // 3, "batches of three: many commits in flight one after another"
    early = [(p, o, c) for p, o, c in handler.injected if c <= o]
    assert not early, f"injected before the broker confirmed an offset past it: {early}"
    assert len({(p, o) for p, o, _ in handler.injected}) == N // 2, "an inject ran twice"
