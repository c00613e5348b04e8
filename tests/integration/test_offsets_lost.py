"""R-FAIL-7 on a real broker: a consumer whose committed offset fell off
retention fails loudly, naming group, partition and how many offsets were lost; never skips."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.kafka.settings import OffsetReset, consumer_config, producer_config
from pipeline.runtime.offsets import (
    OffsetsLostError,
    assign_from_committed,
    find_lost_offsets,
    raise_if_offsets_lost,
)
from pipeline.testing import BrokerHandle

pytestmark = pytest.mark.kafka


def _setup(kafka: BrokerHandle, topic: str, group: str) -> None:
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(100):
        producer.produce(topic, key=b"k", value=str(i).encode())
    assert producer.flush(30) == 0
    # the group read up to offset 10 and committed, then went away
    consumer = Consumer(consumer_config(kafka.bootstrap, group))
    consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    consumer.close()


def _delete_before(kafka: BrokerHandle, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)])
    for fut in futures.values():
        fut.result(timeout=30)  # the log start now is `offset`: retention deleted the rest


def test_committed_offset_behind_log_start_raises_offsets_lost(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    topic = new_topic("lost")
    _setup(kafka, topic, group_id)
    _delete_before(kafka, topic, 60)

    consumer = Consumer(consumer_config(kafka.bootstrap, group_id, offset_reset=OffsetReset.ERROR))
    consumer.subscribe([topic])
    delivered: list[bytes] = []
    try:
        with pytest.raises(OffsetsLostError) as info:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                raise_if_offsets_lost(consumer, msg, group_id)
                if msg is not None and msg.error() is None:
                    delivered.append(msg.value())
    finally:
        consumer.close()
    err = info.value
    assert err.reason == "OFFSETS_LOST" and not err.retriable
    assert err.context == {
        "group": group_id,
        "topic": topic,
        "partition": 0,
        "committed": 10,
        "log_start": 60,
        "log_end": 100,
        "lost": 50,
    }
    assert "50 offset(s) lost" in str(err) and group_id in str(err)
    assert delivered == []  # nothing was silently skipped to and consumed


def test_on_assign_check_names_lost_partitions_only(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    topic = new_topic("lostcheck")
    _setup(kafka, topic, group_id)
    consumer = Consumer(consumer_config(kafka.bootstrap, group_id, offset_reset=OffsetReset.ERROR))
    try:
        assert find_lost_offsets(consumer, group_id, [TopicPartition(topic, 0)]) == []
        _delete_before(kafka, topic, 25)
        [lost] = find_lost_offsets(consumer, group_id, [TopicPartition(topic, 0)])
        assert (lost.committed, lost.log_start, lost.lost) == (10, 25, 15)
    finally:
        consumer.close()
    # a group that never committed is not "lost": its reset policy decides where it starts
    fresh = Consumer(consumer_config(kafka.bootstrap, group_id + ".new"))
    try:
        assert find_lost_offsets(fresh, group_id + ".new", [TopicPartition(topic, 0)]) == []
    finally:
        fresh.close()


def _poll_values(consumer: Consumer, want: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    return got


def test_assign_from_committed_starts_new_groups_at_the_beginning_and_refuses_lost_ones(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """R-FAIL-7 with auto.offset.reset=error: a new group still reads from the start,
    a resumed group continues at its commit, a group whose commit was deleted fails loudly."""
    topic = new_topic("assign")
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(30):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0

    def consumer() -> Consumer:
        c = Consumer(consumer_config(kafka.bootstrap, group_id, offset_reset=OffsetReset.ERROR))
        c.subscribe([topic], on_assign=lambda cc, ps: assign_from_committed(cc, ps, group_id))
        return c

    first = consumer()
    try:
        got = _poll_values(first, 5)
        assert got == [str(i).encode() for i in range(5)]  # a new group starts at the beginning
        first.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        first.close()
    second = consumer()
    try:
        assert _poll_values(second, 1) == [b"5"]  # resumes at its commit
    finally:
        second.close()
    _delete_before(kafka, topic, 20)
    third = consumer()
    try:
        lost = _offsets_lost(lambda: _poll_values(third, 1))
    finally:
        third.close()
    assert (lost["committed"], lost["lost"]) == (5, 15)


def _offsets_lost(call: Callable[[], object]) -> dict[str, Any]:
    """The context of the OffsetsLostError ``call`` raises, the error's traceback dropped: the
    error comes out of librdkafka's assignment callback, which keeps a reference to it that no
    collector sees, and its traceback holds the test's frames - producer, consumers and admin
    client included - for good (they then keep reconnecting to the session's stopped broker)."""
    try:
        call()
    except OffsetsLostError as exc:
        exc.__traceback__ = exc.__context__ = None
        return dict(exc.context)
    raise AssertionError("no OffsetsLostError")


def test_the_runtime_refuses_a_committed_offset_that_fell_off_retention(
    kafka: BrokerHandle, new_topic, group_id, tmp_path
) -> None:
    """R-FAIL-7 in the consumer runtime the gateway's inbox runs: with
    auto.offset.reset=earliest librdkafka would resume at the log start without a word; the
    runtime checks at assignment, counts the lost offsets and raises OFFSETS_LOST instead."""
    from prometheus_client import CollectorRegistry

    from pipeline.runtime import ConsumerRuntime, RuntimeConfig
    from pipeline.runtime.metrics import RuntimeMetrics
    from pipeline.runtime.outcomes import ACK
    from pipeline.store import make_engine, session_factory

    topic = new_topic("lostruntime")
    _setup(kafka, topic, group_id)
    _delete_before(kafka, topic, 60)
    handled: list[int] = []

    class Handler:
        def handle(self, record, tx):  # type: ignore[no-untyped-def]
            handled.append(record.offset)
            return ACK

    registry = CollectorRegistry()
    engine = make_engine(f"sqlite:///{tmp_path / 'rt.sqlite'}")
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=kafka.bootstrap, group_id=group_id, topics=(topic,)),
        handler=Handler(),
        sessions=session_factory(engine),
        dead_letters=None,  # type: ignore[arg-type]
        metrics=RuntimeMetrics(registry),
    )
    rt.subscribe()

    def steps() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rt.step()

    try:
        lost = _offsets_lost(steps)
    finally:
        rt.close()
    assert lost["lost"] == 50 and lost["committed"] == 10
    assert handled == [], "nothing after the gap may be handled: the skip must not be silent"
    lost = registry.get_sample_value("fleet_consumer_offsets_lost_total", {"group": group_id})
    assert lost == 50


def test_the_runtime_reports_a_never_committed_partition_whose_log_was_trimmed(
    kafka: BrokerHandle, new_topic, group_id, tmp_path, caplog
) -> None:
    """Found by the chaos scenario retention-gap: a gateway killed before its first
    commit, its unread records deleted meanwhile, resumed at the log start without a word. Kafka
    cannot tell that group from a new one, so the runtime does not refuse - it reports: an ERROR
    line naming the range and the count in fleet_consumer_offsets_lost_total."""
    import logging

    from prometheus_client import CollectorRegistry

    from pipeline.runtime import ConsumerRuntime, RuntimeConfig
    from pipeline.runtime.metrics import RuntimeMetrics
    from pipeline.runtime.outcomes import ACK
    from pipeline.store import make_engine, session_factory

    topic = new_topic("lostnew")
    producer = Producer(producer_config(kafka.bootstrap))
    for i in range(100):
        producer.produce(topic, key=b"k", value=str(i).encode())
    assert producer.flush(30) == 0
    _delete_before(kafka, topic, 60)
    handled: list[int] = []

    class Handler:
        def handle(self, record, tx):  # type: ignore[no-untyped-def]
            handled.append(record.offset)
            return ACK

    registry = CollectorRegistry()
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=kafka.bootstrap, group_id=group_id, topics=(topic,)),
        handler=Handler(),
        sessions=session_factory(make_engine(f"sqlite:///{tmp_path / 'rt.sqlite'}")),
        dead_letters=None,  # type: ignore[arg-type]
        metrics=RuntimeMetrics(registry),
    )
    rt.subscribe()
    caplog.set_level(logging.ERROR, logger="pipeline.runtime.loop")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(handled) < 40:
            rt.step()
    finally:
        rt.close()
    assert handled[0] == 60 and len(handled) == 40  # a new group may start: it is not refused
    lost = registry.get_sample_value("fleet_consumer_offsets_lost_total", {"group": group_id})
    assert lost == 60
    assert any("deleted before group" in r.getMessage() for r in caplog.records)
