"""A real broker: round-trip, idempotent acks=all, committed offsets."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.testing import BrokerHandle

pytestmark = pytest.mark.kafka


def _drain(consumer: Consumer, want: int, timeout: float = 30.0) -> list:
    import time

    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def test_keyed_round_trip_keeps_headers_and_key(kafka: BrokerHandle, new_topic, group_id) -> None:
    topic = new_topic("roundtrip", partitions=3)
    producer = Producer(producer_config(kafka.bootstrap))
    reports: list = []
    for i in range(30):
        producer.produce(
            topic,
            key=f"gid-{i % 5}".encode(),
            value=f"body-{i}".encode(),
            headers=[("msgId", f"m{i}".encode()), ("kind", b"SEND")],
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
    assert producer.flush(30) == 0
    assert all(err is None for err, _ in reports) and len(reports) == 30
    consumer = Consumer(consumer_config(kafka.bootstrap, group_id))
    consumer.subscribe([topic])
    got = _drain(consumer, 30)
    consumer.close()
    assert len(got) == 30
    by_key: dict[bytes, list[int]] = {}
    for msg in got:
        headers = dict(msg.headers())
        i = int(msg.value().decode().split("-")[1])
        assert headers == {"msgId": f"m{i}".encode(), "kind": b"SEND"}
        assert msg.key() == f"gid-{i % 5}".encode()
        by_key.setdefault(msg.key(), []).append(i)
    # a key always lands on one partition, so per-key order is the send order
    for seq in by_key.values():
        assert seq == sorted(seq)
    partitions_per_key = {(m.key(), m.partition()) for m in got}
    assert len(partitions_per_key) == 5


def test_idempotent_producer_with_acks_all_is_really_configured(
    kafka: BrokerHandle, new_topic
) -> None:
    topic = new_topic("idem")
    conf = producer_config(kafka.bootstrap)
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    producer = Producer(conf)
    errors: list = []
    offsets: list[int] = []
    for i in range(200):
        producer.produce(
            topic,
            key=b"k",
            value=str(i).encode(),
            on_delivery=lambda err, msg: (
                errors.append(err) if err else offsets.append(msg.offset())
            ),
        )
    assert producer.flush(30) == 0
    assert errors == []
    # idempotent producer: contiguous offsets, no gaps, no duplicates
    assert sorted(offsets) == list(range(200))


def test_committed_offset_survives_consumer_restart(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    topic = new_topic("commit")
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(10):
        producer.produce(topic, value=str(i).encode())
    producer.flush(30)

    first = Consumer(consumer_config(kafka.bootstrap, group_id))
    first.subscribe([topic])
    got = _drain(first, 4)
    assert [m.value() for m in got] == [b"0", b"1", b"2", b"3"]
    first.commit(message=got[-1], asynchronous=False)  # commits offset 4 (next to read)
    first.close()

    second = Consumer(consumer_config(kafka.bootstrap, group_id))
    second.subscribe([topic])
    rest = _drain(second, 6)
    second.close()
    assert [m.value() for m in rest] == [str(i).encode() for i in range(4, 10)]


def test_unknown_topic_is_an_error_not_a_black_hole(kafka: BrokerHandle) -> None:
    # auto.create.topics.enable=false on our brokers: producing to a missing topic fails loudly
    producer = Producer(producer_config(kafka.bootstrap, **{"message.timeout.ms": 3000}))
    errors: list = []
    producer.produce("test.no-such-topic.x", value=b"v", on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    if kafka.source == "launcher":
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() in (
            KafkaError._MSG_TIMED_OUT,
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
        )
