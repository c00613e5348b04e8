"""Seed 001 scenario 3 end to end with the failure components on a real broker: a poison record
on key K is retried, dead-lettered with full context and quarantines K; K's later records are
parked (not lost, not reordered) while other keys flow; the quarantine survives a consumer
restart; a release executed by the partition owner delivers K's records in order, each once.

The loop below is a minimal stand-in for the runtime (it retries inline, which the real runtime
must not do: it pauses the partition). It calls the components exactly as docs/failures.md's
"Wiring" section tells the runtime to.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy.orm import Session

from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.handling import FailureHandling
from pipeline.failures.outcomes import Quarantine, Retry
from pipeline.failures.quarantine import QuarantineStore
from pipeline.failures.records import RecordCopy
from pipeline.failures.retry import BackoffPolicy, resolve
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.store import make_engine
from pipeline.testing import BrokerHandle, unique_name

pytestmark = pytest.mark.kafka
POLICY = BackoffPolicy(base_s=0.01, max_s=0.05, max_attempts=3, jitter=0)


class App:
    """The handler's world: effects keyed by msgId (dedupe), and a switch for the poison."""

    def __init__(self) -> None:
        self.applied: dict[str, list[int]] = defaultdict(list)
        self.seen: set[str] = set()
        self.poison: set[str] = set()
        self.attempts: dict[str, int] = defaultdict(int)

    def handle(self, rec: RecordCopy) -> None:
        headers = dict(rec.headers)
        msg_id = headers["msgId"].decode()
        self.attempts[msg_id] += 1
        if msg_id in self.poison:
            raise RuntimeError(f"cannot handle {msg_id}")
        if msg_id in self.seen:
            return  # dedupe: a replay has no second effect
        self.seen.add(msg_id)
        self.applied[(rec.key or b"").decode()].append(int(headers["seq"]))


class Loop:
    def __init__(self, kafka: BrokerHandle, db: str, topic: str, dlq: str, group: str) -> None:
        self.engine = make_engine(db)
        self.store = QuarantineStore(self.engine)
        self.failures = FailureHandling(
            group=group,
            writer=DeadLetterWriter(kafka.bootstrap, TopicNames(), "h1", group=group, topic=dlq),
            quarantine=self.store,
        )
        self.consumer = Consumer(consumer_config(kafka.bootstrap, group))
        self.assigned: set[int] = set()

        def on_assign(consumer: Any, parts: list[Any]) -> None:
            self.assigned |= {p.partition for p in parts}
            self.store.refresh(self.failures.scope(topic))  # see what a previous owner wrote

        def on_revoke(consumer: Any, parts: list[Any]) -> None:
            self.assigned -= {p.partition for p in parts}

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self.topic = topic

    def process(self, app: App, msg: Any) -> None:
        with Session(self.engine) as session, session.begin():
            if self.failures.is_parked_key(msg):
                self.failures.park(session, msg)
            else:
                first = int(time.time() * 1000)
                attempt = 0
                while True:
                    attempt += 1
                    try:
                        app.handle(RecordCopy.from_message(msg))
                        break
                    except RuntimeError as exc:
                        outcome = resolve(
                            Retry(error=str(exc)), attempt=attempt, policy=POLICY, ordered=True
                        )
                        if isinstance(outcome, Retry):
                            time.sleep(outcome.delay_s or 0)
                            continue
                        assert isinstance(outcome, Quarantine)
                        self.failures.dead_letter(
                            session,
                            msg,
                            outcome,
                            attempts=attempt,
                            first_failure_ms=first,
                            verified=True,
                        )
                        break
        self.consumer.commit(message=msg, asynchronous=False)

    def run_releases(self, app: App) -> int:
        scope = self.failures.scope(self.topic)
        done = 0
        for req in self.store.pending_releases(scope):
            if req.partition not in self.assigned:
                continue  # another member owns it and will execute it
            for parked in self.store.take_for_release(scope, req.key):
                app.handle(parked.record)
            with Session(self.engine) as session, session.begin():
                self.store.complete_release(session, scope, req.key)
            done += 1
        return done

    def run(self, app: App, count: int) -> None:
        """Process ``count`` new records (running due releases between polls)."""
        deadline = time.monotonic() + 90
        while count > 0:
            assert time.monotonic() < deadline, f"{count} record(s) never arrived"
            self.run_releases(app)
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            self.process(app, msg)
            count -= 1

    def close(self) -> None:
        self.consumer.close()
        self.failures.writer.close()
        self.engine.dispose()


def quarantine_entries(db: str) -> list[Any]:
    engine = make_engine(db)
    try:
        return QuarantineStore(engine).list()
    finally:
        engine.dispose()


def produce(kafka: BrokerHandle, topic: str, records: list[tuple[str, int, str]]) -> None:
    producer = Producer(producer_config(kafka.bootstrap))
    for key, seq, msg_id in records:
        producer.produce(
            topic,
            key=key.encode(),
            value=b"x",
            headers=[("msgId", msg_id.encode()), ("seq", str(seq).encode())],
        )
    assert producer.flush(30) == 0


def test_poison_key_quarantined_parked_survives_restart_and_releases_in_order(
    kafka: BrokerHandle, new_topic, tmp_path
) -> None:
    topic, dlq = new_topic("inbox", partitions=2), new_topic("dlq")
    group, db = unique_name("test.gw"), f"sqlite:///{tmp_path / 'gw.sqlite'}"
    keys = ["K", "a", "b", "c", "d"]
    seqs: dict[str, int] = defaultdict(int)

    def batch(n: int) -> list[tuple[str, int, str]]:
        out = []
        for i in range(n):
            key = keys[i % len(keys)]
            out.append((key, seqs[key], f"{key}-{seqs[key]}"))
            seqs[key] += 1
        return out

    app = App()
    app.poison.add("K-2")
    produce(kafka, topic, batch(50))
    loop = Loop(kafka, db, topic, dlq, group)
    try:
        loop.run(app, 50)
    finally:
        loop.close()
    assert app.applied["K"] == [0, 1]  # K stops at the poison record ...
    for key in "abcd":
        assert app.applied[key] == list(range(10))  # ... every other key flows, in order
    assert app.attempts["K-2"] == POLICY.max_attempts
    [dead] = list(dlq_ops.scan(kafka.bootstrap, dlq))
    c = dead.context
    assert (dead.msg_id, c["reason"], c["attempts"], c["quarantined"], c["group"]) == (
        "K-2",
        "RETRIES_EXHAUSTED",
        3,
        True,
        group,
    )
    assert c["topic"] == topic and "cannot handle K-2" in c["error"]
    [entry] = quarantine_entries(db)
    assert (entry.key, entry.parked, entry.dead_letter_ref) == ("K", 7, dead.ref)

    # gateway restart: the quarantine holds, new K records park behind the old ones
    produce(kafka, topic, batch(10))
    loop = Loop(kafka, db, topic, dlq, group)
    try:
        loop.run(app, 10)
        assert app.applied["K"] == [0, 1]
        assert all(app.applied[k] == list(range(12)) for k in "abcd")
        # the fix is deployed; the operator files a release; the owner executes it in its loop
        app.poison.clear()
        loop.store.request_release(loop.failures.scope(topic), "K")
        produce(kafka, topic, batch(5))  # new K records after the release request
        loop.run(app, 5)
    finally:
        loop.close()
    assert app.applied["K"] == list(range(seqs["K"]))  # original order, each exactly once
    assert all(app.applied[k] == list(range(seqs[k])) for k in "abcd")
    assert quarantine_entries(db) == []


def test_quarantine_follows_the_partition_to_another_member(
    kafka: BrokerHandle, new_topic, tmp_path
) -> None:
    """Seed 001 scenario 3 with a rebalance: member A quarantines K; A leaves; member B, whose
    cache was loaded before, takes K's partition, refreshes on assignment and parks K's later
    records instead of handling them out of order."""
    topic, dlq = new_topic("inbox", partitions=2), new_topic("dlq")
    group, db = unique_name("test.gw"), f"sqlite:///{tmp_path / 'gw.sqlite'}"
    app = App()
    app.poison.add("K-1")
    a = Loop(kafka, db, topic, dlq, group)
    b = Loop(kafka, db, topic, dlq, group)
    try:
        deadline = time.monotonic() + 60
        while not (a.assigned and b.assigned and len(a.assigned | b.assigned) == 2):
            assert time.monotonic() < deadline, "the group never settled"
            a.consumer.poll(0.1)
            b.consumer.poll(0.1)
        [pa] = a.assigned
        assert not b.store.is_quarantined(b.failures.scope(topic), "K")  # B's cache: loaded, empty
        producer = Producer(producer_config(kafka.bootstrap))

        def send(seq: int) -> None:
            producer.produce(
                topic,
                key=b"K",
                value=b"x",
                partition=pa,
                headers=[("msgId", f"K-{seq}".encode()), ("seq", str(seq).encode())],
            )

        for seq in range(4):
            send(seq)
        assert producer.flush(30) == 0
        a.run(app, 4)  # K-0 applied, K-1 quarantined, K-2 and K-3 parked
        assert app.applied["K"] == [0]
    finally:
        a.close()  # A leaves: its partition moves to B
    try:
        for seq in range(4, 6):
            send(seq)
        assert producer.flush(30) == 0
        b.run(app, 2)
        assert pa in b.assigned
    finally:
        b.close()
    assert app.applied["K"] == [0]  # nothing of K overtook the quarantined record
    [entry] = quarantine_entries(db)
    assert (entry.key, entry.parked) == ("K", 4)
