"""R-FAIL-3 with a rebalance, in the runtime production runs: two real
``ConsumerRuntime`` members share a group on a real broker; member A quarantines key K; A leaves;
member B, whose quarantine cache was loaded before, takes K's partition, refreshes on assignment
and parks K's later records instead of handling them out of order.

(The single-member poison/restart/release flow is ``test_runtime_failures.py``.)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.failures.runtime_adapters import FailurePorts
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.runtime import ConsumerRuntime, Record, RuntimeConfig, Staged
from pipeline.runtime.outcomes import ACK, Outcome, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name

from .runtime_members import owned, settle, step_until

pytestmark = pytest.mark.kafka


class App:
    """Applies records in after-commit effects; msgIds in ``poison`` fail transiently."""

    def __init__(self) -> None:
        self.applied: dict[str, list[int]] = defaultdict(list)
        self.poison: set[str] = set()

    def handle(self, record: Record, tx: Staged) -> Outcome:
        if record.header_str("msgId") in self.poison:
            return Retry(error="downstream rejects this one")
        key, seq = record.key_str or "", int(record.header_str("seq") or -1)
        tx.after_commit(lambda: self.applied[key].append(seq))
        return ACK


def test_quarantine_follows_the_partition_to_another_member(
    kafka: BrokerHandle, new_topic, tmp_path: Any
) -> None:
    topic, dlq = new_topic("inbox", partitions=2), new_topic("dlq")
    group = unique_name("test.gw")
    engine = make_engine(f"sqlite:///{tmp_path / 'gw.sqlite'}")
    app = App()
    app.poison.add("K-1")
    members: list[ConsumerRuntime] = []
    ports: list[FailurePorts] = []
    for host in ("a", "b"):
        p = FailurePorts(
            writer=DeadLetterWriter(kafka.bootstrap, TopicNames(), host, group=group, topic=dlq),
            store=QuarantineStore(engine),  # one cache per member, as in two processes
        )
        ports.append(p)
        members.append(
            ConsumerRuntime(
                RuntimeConfig(
                    bootstrap=kafka.bootstrap,
                    group_id=group,
                    topics=(topic,),
                    ordered=True,
                    retry=BackoffPolicy(base_s=0.05, max_s=0.2, max_attempts=3, jitter=0),
                ),
                handler=app,
                sessions=session_factory(engine),
                dead_letters=p,
                quarantine=p,
            )
        )
    a, b = members
    store = QuarantineStore(engine)
    scope = Scope(group, "*")

    def parked() -> int:
        return sum(e.parked for e in store.list(scope))

    for m in members:
        m.subscribe()
    producer = Producer(producer_config(kafka.bootstrap))
    try:
        settle(members, 2)
        [pa] = owned(a)
        assert not ports[1].is_quarantined(group, "K")  # B's cache: loaded, empty

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
        # K-0 applied, K-1 retried then quarantined, K-2 and K-3 parked
        step_until(members, lambda: parked() == 2)
        assert app.applied["K"] == [0]
    finally:
        a.close()  # A leaves: its partition moves to B
    try:
        for seq in range(4, 6):
            send(seq)
        assert producer.flush(30) == 0
        step_until([b], lambda: parked() == 4)
        assert pa in owned(b)
    finally:
        b.close()
    assert app.applied["K"] == [0]  # nothing of K overtook the quarantined record
    [entry] = store.list(scope)
    assert (entry.key, entry.parked, entry.reason) == ("K", 4, "RETRIES_EXHAUSTED")
    engine.dispose()
