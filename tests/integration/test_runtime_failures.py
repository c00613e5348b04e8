"""The lead's ConsumerRuntime wired to the failure components through their runtime ports, on a
real broker (R-FAIL-3): a deterministic poison record on key K among many keys is
retried, dead-lettered with full context and quarantines K; K's later records are parked, not
lost and not reordered, while other keys flow; after a restart the quarantine holds; a release
delivers K's records in original order, each exactly once."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy.engine import Engine

from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.failures.runtime_adapters import FailurePorts
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.record import Record
from pipeline.runtime.loop import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.outcomes import ACK, Outcome, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.runtime.staging import Staged
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name

pytestmark = pytest.mark.kafka


class Handler:
    def __init__(self) -> None:
        self.applied: dict[str, list[int]] = defaultdict(list)
        self.poison: set[str] = set()

    def handle(self, record: Record, tx: Staged) -> Outcome:
        if record.header_str("msgId") in self.poison:
            return Retry(error="downstream rejects this one")
        key, seq = record.key_str or "", int(record.header_str("seq") or -1)
        tx.after_commit(lambda: self.applied[key].append(seq))
        return ACK


def start(
    kafka: BrokerHandle, engine: Engine, topic: str, dlq: str, group: str, handler: Handler
) -> tuple[ConsumerRuntime, FailurePorts]:
    ports = FailurePorts(
        writer=DeadLetterWriter(kafka.bootstrap, TopicNames(), "h1", group=group, topic=dlq),
        store=QuarantineStore(engine),
    )
    config = RuntimeConfig(
        bootstrap=kafka.bootstrap,
        group_id=group,
        topics=(topic,),
        ordered=True,
        retry=BackoffPolicy(base_s=0.05, max_s=0.2, max_attempts=3, jitter=0),
        release_check_s=0.2,
    )
    rt = ConsumerRuntime(
        config,
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=ports,
        quarantine=ports,
    )
    rt.subscribe()
    return rt, ports


def until(rt: ConsumerRuntime, done: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "condition never met"
        rt.step()


def produce(kafka: BrokerHandle, topic: str, records: list[tuple[str, int]]) -> None:
    producer = Producer(producer_config(kafka.bootstrap))
    for key, seq in records:
        producer.produce(
            topic,
            key=key.encode(),
            value=b"x",
            headers=[("msgId", f"{key}-{seq}".encode()), ("seq", str(seq).encode())],
        )
    assert producer.flush(30) == 0


def test_runtime_poison_key_quarantine_restart_and_release(
    kafka: BrokerHandle, new_topic, tmp_path: Any
) -> None:
    topic, dlq = new_topic("inbox", partitions=3), new_topic("dlq")
    group = unique_name("test.gw")
    engine = make_engine(f"sqlite:///{tmp_path / 'gw.sqlite'}")
    store = QuarantineStore(engine)
    scope = Scope(group, "*")
    keys = ["K", *(f"k{i}" for i in range(9))]
    sent: dict[str, int] = defaultdict(int)

    def batch(n: int) -> list[tuple[str, int]]:
        out = []
        for i in range(n):
            key = keys[i % len(keys)]
            out.append((key, sent[key]))
            sent[key] += 1
        return out

    def others_done() -> bool:
        return all(len(handler.applied[k]) == sent[k] for k in keys[1:])

    def parked() -> int:
        return sum(e.parked for e in store.list(scope))

    handler = Handler()
    handler.poison.add("K-2")
    produce(kafka, topic, batch(200))
    rt, _ = start(kafka, engine, topic, dlq, group, handler)
    try:
        until(rt, lambda: others_done() and parked() == 17)
    finally:
        rt.close()
    assert handler.applied["K"] == [0, 1]
    assert all(handler.applied[k] == list(range(20)) for k in keys[1:])
    [dead] = list(dlq_ops.scan(kafka.bootstrap, dlq))
    c = dead.context
    assert (dead.msg_id, c["reason"], c["attempts"], c["topic"], c["group"]) == (
        "K-2",
        "RETRIES_EXHAUSTED",
        3,
        topic,
        group,
    )
    assert c["verified"] is True and "downstream rejects" in c["error"]
    [entry] = store.list(scope)
    assert (entry.key, entry.dead_letter_ref, entry.src_topic) == ("K", dead.ref, topic)

    # restart: a new runtime (new store cache) still parks K, others flow
    produce(kafka, topic, batch(50))
    rt, _ = start(kafka, engine, topic, dlq, group, handler)
    try:
        until(rt, lambda: others_done() and parked() == 22)
        assert handler.applied["K"] == [0, 1]
        handler.poison.clear()  # the fix is deployed
        rid = QuarantineStore(engine).request_release(scope, "K")
        until(rt, lambda: store.release_status(rid).state == "DONE")
        produce(kafka, topic, batch(20))
        until(rt, lambda: others_done() and len(handler.applied["K"]) == sent["K"])
    finally:
        rt.close()
        engine.dispose()
    assert handler.applied["K"] == list(range(sent["K"]))  # original order, each exactly once
    assert all(handler.applied[k] == list(range(sent[k])) for k in keys[1:])
