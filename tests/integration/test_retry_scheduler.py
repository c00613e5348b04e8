"""Non-blocking retry in the runtime production runs, on a real broker with two real members
(R-FAIL-2: a slow or failing record must not stall poll past max.poll.interval.ms;
scenario 3: retries keep the partition's order)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from pipeline.kafka.settings import producer_config
from pipeline.runtime import ConsumerRuntime, Record, RuntimeConfig, Staged
from pipeline.runtime.context import FailureContext
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.outcomes import ACK, Outcome, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle

from .runtime_members import owned, rebalances, settle, step_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


class FailsThreeTimes:
    """Fails one record (``target``) three times with a 4 s retry, then handles it."""

    def __init__(self, target: tuple[int, int]) -> None:
        self.target = target
        self.seen: list[tuple[int, int]] = []
        self.attempts = 0

    def handle(self, record: Record, tx: Staged) -> Outcome:
        if (record.partition, record.offset) == self.target:
            self.attempts += 1
            if self.attempts <= 3:
                return Retry(delay_s=4.0, error="downstream busy")
        self.seen.append((record.partition, record.offset))
        return ACK


class NoDeadLetters:
    def stage(self, tx: Staged, failure: FailureContext) -> None:
        raise AssertionError(f"nothing may be dead-lettered: {failure}")


def test_deferred_record_pauses_only_its_partition_and_comes_back_in_order(
    kafka: BrokerHandle, new_topic, group_id, tmp_path: Any
) -> None:
    topic = new_topic("retry", partitions=4)
    engine = make_engine(f"sqlite:///{tmp_path / 'rt.sqlite'}")
    registries = [CollectorRegistry(), CollectorRegistry()]
    handlers: list[FailsThreeTimes] = []
    members: list[ConsumerRuntime] = []
    for registry in registries:
        handler = FailsThreeTimes(target=(-1, -1))
        handlers.append(handler)
        members.append(
            ConsumerRuntime(
                RuntimeConfig(
                    bootstrap=kafka.bootstrap,
                    group_id=group_id,
                    topics=(topic,),
                    retry=BackoffPolicy(max_attempts=5),
                    # retry waits add up to 12 s, longer than max.poll.interval.ms: had the
                    # runtime slept instead of pausing, the member would have been thrown out
                    # of the group (a revoke, then duplicates)
                    consumer_overrides={"max.poll.interval.ms": 10000},
                ),
                handler=handler,
                sessions=session_factory(engine),
                dead_letters=NoDeadLetters(),
                metrics=RuntimeMetrics(registry),
            )
        )
    for m in members:
        m.subscribe()
    try:
        settle(members, 4)
        owned_a = owned(members[0])
        pa, other = sorted(owned_a)[0], (sorted(owned_a)[1] if len(owned_a) > 1 else None)
        handlers[0].target = (pa, 3)
        producer = Producer(producer_config(kafka.bootstrap))
        for i in range(40):
            producer.produce(topic, value=str(i).encode(), partition=i % 4)
        assert producer.flush(30) == 0
        before = [rebalances(r, group_id, "revoke") for r in registries]
        step_until(members, lambda: sum(len(h.seen) for h in handlers) == 40)
        after = [rebalances(r, group_id, "revoke") for r in registries]
    finally:
        for m in members:
            m.close()
        engine.dispose()
    by_partition: dict[int, list[int]] = defaultdict(list)
    for h in handlers:
        for p, o in h.seen:
            by_partition[p].append(o)
    # nothing behind the failed record overtook it, no duplicate, every partition complete
    assert {p: offs for p, offs in by_partition.items()} == {p: list(range(10)) for p in range(4)}
    assert handlers[0].attempts == 4
    assert after == before  # no rebalance while the record waited
    seen_a = handlers[0].seen
    if other is not None:  # the member's other partition flowed while pa was paused
        assert seen_a.index((other, 9)) < seen_a.index((pa, 3))
    # and the other member's partitions never waited on A's retry
    assert handlers[1].seen and all(p not in owned_a for p, _ in handlers[1].seen)
