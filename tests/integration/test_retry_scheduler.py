"""Non-blocking retry on a real broker (seed 001 scenario 2: a slow or failing record must not
stall poll past max.poll.interval.ms; scenario 3: retries keep the partition's order)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from pipeline.failures.scheduler import RetryScheduler
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.testing import BrokerHandle

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_deferred_record_pauses_only_its_partition_and_comes_back_in_order(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    topic = new_topic("retry", partitions=2)
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(20):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0

    # retry waits add up to 12 s, longer than max.poll.interval.ms: had we slept instead of
    # pausing, the member would have been thrown out of the group (a revoke, then duplicates)
    consumer = Consumer(
        consumer_config(kafka.bootstrap, group_id, **{"max.poll.interval.ms": 10000})
    )
    revoked: list[object] = []
    consumer.subscribe([topic], on_revoke=lambda _c, parts: revoked.extend(parts))
    scheduler = RetryScheduler(consumer)
    seen: list[tuple[int, int]] = []
    failures_left = 3  # offset 3 of partition 0 fails three times, then succeeds
    attempts_seen: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len({s for s in seen}) < 20 and time.monotonic() < deadline:
            scheduler.resume_due()
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            prior = scheduler.attempts_for(msg)
            attempt = 1 + (prior[0] if prior else 0)
            if msg.partition() == 0 and msg.offset() == 3 and failures_left:
                failures_left -= 1
                attempts_seen.append(attempt)
                scheduler.defer(msg, delay_s=4.0, attempt=attempt, first_failure_ms=0)
                assert scheduler.waiting == 1
                continue
            if msg.partition() == 0 and msg.offset() == 3:
                attempts_seen.append(attempt)
            scheduler.settled(msg)
            seen.append((msg.partition(), msg.offset()))
        during = list(revoked)  # close() below revokes on purpose; count only what came before
    finally:
        consumer.close()
    p0 = [o for p, o in seen if p == 0]
    p1 = [o for p, o in seen if p == 1]
    assert p0 == list(range(10))  # nothing behind the failed record overtook it, no duplicate
    assert p1 == list(range(10))  # the other partition flowed meanwhile
    assert attempts_seen == [1, 2, 3, 4]
    assert during == []  # no rebalance while the record waited
    # partition 1 finished while partition 0 was still waiting on its retries
    assert seen.index((1, 9)) < seen.index((0, 3))
