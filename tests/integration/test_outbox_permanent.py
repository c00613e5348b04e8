"""Permanent produce errors on a real broker (the producer side has the same gap as
the consumer's).

R-OUT-3: per-branch order -- never a later row delivered ahead of an earlier one -- and the relay
keeps serving other branches; a permanent error is a terminal state with its reason, not a retry.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from pipeline.errors import FleetError
from pipeline.kafka.settings import consumer_config
from pipeline.outbox import Relay, RowStatus, fold_position, outbox, write
from pipeline.outbox.limits import DEFAULT_MAX_RECORD_BYTES
from pipeline.outbox.sent import is_sent
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name

pytestmark = pytest.mark.kafka

BIG = b"x" * (2 * 1024 * 1024)


def _read(bootstrap: str, topic: str, want: int) -> list[tuple[str, int]]:
    consumer = Consumer(consumer_config(bootstrap, unique_name("test.permanent")))
    consumer.subscribe([topic])
    got: list[tuple[str, int]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            pos = fold_position(msg.headers())
            assert pos is not None
            got.append(pos)
        extra = consumer.poll(1.0)  # nothing else arrives (the stopped branch stays stopped)
        assert extra is None, fold_position(extra.headers())
    finally:
        consumer.close()
    return got


def test_a_refused_row_is_terminal_its_branch_stops_and_others_go_on(
    kafka: BrokerHandle, new_topic, tmp_path: Path
) -> None:
    """R-OUT-3 per-branch order: lsn 3 of branch "a" never reaches the consumer while lsn 2 (too
    large, written past the send-side check) never can; branch "b" keeps flowing."""
    topic = new_topic("outbox-permanent")
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        write(s, topic=topic, key=b"a", value=b"a1", branch_key="a")
        write(s, topic=topic, key=b"a", value=BIG, branch_key="a", max_record_bytes=None)
        write(s, topic=topic, key=b"a", value=b"a3", branch_key="a")
        for i in range(3):
            write(s, topic=topic, key=b"b", value=f"b{i}".encode(), branch_key="b")
    registry = CollectorRegistry()
    relay = Relay(engine=engine, bootstrap=kafka.bootstrap, registry=registry)
    try:
        relay.drain()  # no BrokerError: a permanent refusal is not a failed delivery to retry
        with sessions.begin() as s:
            write(s, topic=topic, key=b"b", value=b"b3", branch_key="b")
        relay.drain()  # later passes: branch a stays stopped, b goes on
        assert relay.drain() == 0
    finally:
        relay.close()

    with engine.connect() as conn:
        rows = {
            (b, lsn): (RowStatus.SENT if sent else st, err)  # sent: under the ack watermark
            for b, lsn, st, err, sent in conn.execute(
                select(
                    outbox.c.branch_key, outbox.c.lsn, outbox.c.status, outbox.c.error, is_sent()
                )
            )
        }
    assert rows[("a", 1)] == (RowStatus.SENT, None)
    assert rows[("a", 2)] == (RowStatus.FAILED, "MSG_SIZE_TOO_LARGE")
    assert rows[("a", 3)] == (RowStatus.PENDING, None)
    assert all(rows[("b", i)][0] == RowStatus.SENT for i in range(1, 5))
    assert (
        registry.get_sample_value(
            "fleet_outbox_rows_failed_total", {"reason": "MSG_SIZE_TOO_LARGE"}
        )
        == 1
    )
    assert registry.get_sample_value("fleet_outbox_stopped_branches") == 1

    got = _read(kafka.bootstrap, topic, want=5)
    assert [lsn for b, lsn in got if b == "a"] == [1]
    assert [lsn for b, lsn in got if b == "b"] == [1, 2, 3, 4]

    # a new relay (a restart) learns the stopped branch from the store
    relay2 = Relay(engine=engine, bootstrap=kafka.bootstrap)
    try:
        assert relay2.drain() == 0
    finally:
        relay2.close()
    engine.dispose()


def test_the_writer_refuses_a_record_above_the_limit_naming_it(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    sessions = session_factory(engine)
    with pytest.raises(FleetError) as caught, sessions.begin() as s:
        write(s, topic="t", key=b"k", value=BIG, branch_key="a")
    assert caught.value.reason == "TOO_LARGE" and not caught.value.retriable
    assert str(DEFAULT_MAX_RECORD_BYTES) in str(caught.value)
    with engine.connect() as conn:
        assert conn.execute(select(outbox.c.id)).first() is None
    engine.dispose()


def test_the_gateway_tells_the_sender_failed_when_its_row_is_refused(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-OUT-8: a send that cannot be delivered ends in exactly one FAILED to its sender; here
    the broker refused the row for good (too large, written past the send-side check)."""
    from pipeline.bootstrap.gateway import build_gateway
    from pipeline.envelope import Envelope, Kind, encode
    from pipeline.envelope.receipts import read_receipt
    from pipeline.host.entity_config import EntityConfig
    from pipeline.host.gateway_config import GatewayConfig
    from pipeline.kafka.topics import TopicNames
    from pipeline.presence.roles import Delivery, Role
    from pipeline.support.waiting import wait_until
    from tests.integration.fleet_hosts import Fleet

    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    pull = Role.MAIN, Delivery.PULL
    config = GatewayConfig(
        host="A",
        bootstrap=kafka.bootstrap,
        store_url=f"sqlite:///{tmp_path / 'A.sqlite'}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=(
            EntityConfig(gid="main-a", role=pull[0], delivery=pull[1]),
            EntityConfig(gid="main-b", role=pull[0], delivery=pull[1]),
        ),
    )
    a = build_gateway(config, signer=fleet.signers["A"], trust=fleet.trust)
    a.gateway.start()
    try:
        wait_until(lambda: a.client.knows("main-b"), timeout_s=30, what="presence of main-b")
        with pytest.raises(FleetError) as refused:  # what `fleet send` meets: nothing written
            a.client.send(sender="main-a", to="main-b", body=BIG)
        assert refused.value.reason == "TOO_LARGE"
        assert f"limit of {DEFAULT_MAX_RECORD_BYTES} bytes" in str(refused.value)
        big = Envelope.new(kind=Kind.SEND, sender="main-a", to="main-b", body=BIG, ttl_s=60)
        topic = TopicNames(prefix=fleet.prefix).inbox("A")
        key, headers, value = encode(big, topic=topic, signer=fleet.signers["A"])
        with session_factory(a.engine).begin() as s:  # past the send-side check, on purpose
            write(
                s,
                topic=topic,
                key=key,
                value=value,
                headers=headers,
                branch_key="A>main-b@A",
                max_record_bytes=None,
            )
        failed: list = []

        def got_failed() -> bool:
            failed.extend(a.client.poll("main-a", kinds=["FAILED"]))
            return bool(failed)

        wait_until(got_failed, timeout_s=30, what="a FAILED for the refused send")
        assert failed[0].msg_id == f"failed-{big.msg_id}"
        receipt = read_receipt("FAILED", failed[0].body)
        assert receipt.msg_id == big.msg_id and receipt.reason == "MSG_SIZE_TOO_LARGE"
        assert a.client.poll("main-b") == []  # nothing reached the recipient
    finally:
        a.gateway.stop()
