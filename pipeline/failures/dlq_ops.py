"""Reading and replaying the dead-letter topic for the operator (R-DLQ-3: a DLQ needs a replay tool).

Replay re-produces each dead letter to its ORIGINAL topic and partition with its original key,
headers and body -- so the same ``msgId`` and signature -- in DLQ offset order. All dead letters of
one key sit on one DLQ partition (the DLQ is keyed by the original key), so reading partition by
partition in offset order and producing with the idempotent producer keeps per-key order. Replay
is safe only because consumers dedupe on ``msgId``: replaying twice has no second effect.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.errors import BrokerError
from pipeline.kafka.clients import ClientFactory, new_consumer, new_producer
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import DLQ_SCAN_GROUP_PREFIX
from pipeline.reasons import Failure, Platform
from pipeline.record import key_text

from .dlq import DeadLetterView, read_dead_letter


def scan(
    bootstrap: str,
    dlq_topic: str,
    *,
    timeout_s: float = 30.0,
    consumer_factory: ClientFactory = new_consumer,
) -> Iterator[DeadLetterView]:
    """Every dead letter present now, partition by partition, in offset order. Commits nothing
    (``assign`` only: the scan group needs no ACL)."""
    group = f"{DLQ_SCAN_GROUP_PREFIX}{uuid.uuid4().hex[:8]}"
    consumer = consumer_factory(consumer_config(bootstrap, group))
    try:
        meta = consumer.list_topics(dlq_topic, timeout=timeout_s).topics[dlq_topic]
        if meta.error is not None:
            raise BrokerError(
                f"cannot read {dlq_topic}: {meta.error}", reason=Platform.BROKER_ERROR
            )
        for partition in sorted(meta.partitions):
            yield from _scan_partition(consumer, dlq_topic, partition, timeout_s)
    finally:
        consumer.close()


def _scan_partition(
    consumer: Consumer, topic: str, partition: int, timeout_s: float
) -> Iterator[DeadLetterView]:
    low, high = consumer.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=timeout_s, cached=False
    )
    if high <= low:
        return
    consumer.assign([TopicPartition(topic, partition, low)])
    next_offset = low
    deadline = time.monotonic() + timeout_s
    while next_offset < high:
        msg = consumer.poll(0.5)
        if msg is None:
            if time.monotonic() > deadline:
                raise BrokerError(f"timed out reading {topic}[{partition}] at {next_offset}")
            continue
        if msg.error() is not None:
            raise BrokerError(f"reading {topic}[{partition}]: {msg.error()}")
        deadline = time.monotonic() + timeout_s
        offset = msg.offset()
        assert offset is not None  # a fetched record always has one
        next_offset = offset + 1
        yield read_dead_letter(msg)
    consumer.unassign()


def select(
    views: Iterable[DeadLetterView],
    *,
    reason: str | None = None,
    key: str | None = None,
    topic: str | None = None,
    limit: int | None = None,
) -> Iterator[DeadLetterView]:
    """Filter dead letters (reason code, key text, original topic), keeping their order."""
    n = 0
    for view in views:
        if limit is not None and n >= limit:
            return
        if reason is not None and view.reason != reason:
            continue
        if key is not None and key_text(view.key) != key:
            continue
        if topic is not None and view.context["topic"] != topic:
            continue
        n += 1
        yield view


@dataclass
class ReplayResult:
    replayed: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)


def replay(
    views: Iterable[DeadLetterView],
    *,
    bootstrap: str | None = None,
    producer: Producer | None = None,
    timeout_s: float = 60.0,
    producer_factory: ClientFactory = new_producer,
) -> ReplayResult:
    """Re-produce ``views`` to their original topic/partition, in the order given.

    Raises a retriable :class:`BrokerError` (``REPLAY_FAILED``) if any delivery failed; replaying
    again after that is safe (consumers dedupe on ``msgId``).
    """
    if producer is None:
        if bootstrap is None:
            raise ValueError("replay needs a bootstrap or a producer")
        producer = producer_factory(producer_config(bootstrap))
    result = ReplayResult()
    errors: list[Any] = []

    def _report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for view in views:
        target = str(view.context["topic"])
        while True:
            try:
                producer.produce(
                    target,
                    key=view.key,
                    value=view.value,
                    headers=list(view.headers),
                    partition=int(view.context["partition"]),
                    on_delivery=_report,
                )
                break
            except BufferError:  # local queue full: let deliveries drain, then go on in order
                producer.poll(0.1)
        result.replayed += 1
        result.by_topic[target] = result.by_topic.get(target, 0) + 1
        producer.poll(0)
    left = producer.flush(timeout_s)
    if errors or left:
        raise BrokerError(
            f"replay: {len(errors)} delivery error(s), {left} unconfirmed; first: "
            f"{errors[0] if errors else 'timeout'}",
            reason=Failure.REPLAY_FAILED,
            retriable=True,
        )
    return result
