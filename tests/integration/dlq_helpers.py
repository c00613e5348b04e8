"""Shared helpers for the failure-handling integration tests (real broker)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.failures.dlq import DeadLetterWriter
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.testing import unique_name


def produce_originals(bootstrap: str, topic: str, n: int, keys: int, **extra: bytes) -> None:
    """``n`` records over ``keys`` keys; header ``seq`` is the per-key send order."""
    producer = Producer(producer_config(bootstrap))
    seqs: dict[int, int] = {}
    for i in range(n):
        k = i % keys
        seqs[k] = seqs.get(k, -1) + 1
        headers = [
            ("msgId", f"m-{i}".encode()),
            ("seq", str(seqs[k]).encode()),
            *((name, value) for name, value in extra.items()),
        ]
        producer.produce(
            topic, key=f"key-{k}".encode(), value=f"body-{i}".encode(), headers=headers
        )
        producer.poll(0)
    assert producer.flush(30) == 0


def read_all(
    bootstrap: str,
    topic: str,
    want: int,
    *,
    start: dict[int, int] | None = None,
    timeout_s: float = 60.0,
) -> list[Any]:
    """Read ``want`` records from ``topic`` (from ``start`` offsets, else the beginning)."""
    consumer = Consumer(consumer_config(bootstrap, unique_name("test.read")))
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign(
        [TopicPartition(topic, p, (start or {}).get(p, 0)) for p in sorted(meta.partitions)]
    )
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer(consumer_config(bootstrap, unique_name("test.wm")))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def dead_letter_all(bootstrap: str, source: str, dlq: str, n: int, **context: Any) -> list[Any]:
    """Consume ``n`` records of ``source`` and dead-letter each with the real writer."""
    msgs = read_all(bootstrap, source, n)
    assert len(msgs) == n
    writer = DeadLetterWriter(bootstrap, TopicNames(), "h1", group="g1", topic=dlq)
    for msg in msgs:
        _, ts = msg.timestamp()
        writer.send(
            FailureContext(
                record=Record.from_message(msg),
                reason=context.get("reason", "RETRIES_EXHAUSTED"),
                error=context.get("error", "boom"),
                attempts=5,
                first_failure_ms=ts + 1,
                last_failure_ms=ts + 2,
            )
        )
    writer.close()
    return msgs
