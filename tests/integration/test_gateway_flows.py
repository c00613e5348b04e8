"""The gateway's flows on a real broker, two in-process gateways (hosts A and B).

Each test names the requirement it checks (docs/requirements.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.envelope import Kind, Signer
from pipeline.errors import DeliveryError
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, str, bytes]] = []  # gid, kind, msg_id, body
        self.lock = threading.Lock()
        self.hold: threading.Event | None = None  # set: the next inject waits for it
        self.holding = threading.Event()  # set while an inject waits
        self.signers: dict[str, Signer] = {}  # the fleet's keys, for a test that signs as a host

    def __call__(self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        with self.lock:
            self.got.append((gid, kind, msg_id, body))
            hold, self.hold = self.hold, None
        if hold is not None:
            self.holding.set()
            hold.wait(20)

    def of(self, gid: str, kind: str | None = None) -> list[tuple[str, str, str, bytes]]:
        with self.lock:
            return [g for g in self.got if g[0] == gid and (kind is None or g[1] == kind)]


def _inject(gid: str, groups: tuple[str, ...] = ()) -> EntityConfig:
    return EntityConfig(
        gid=gid,
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        groups=groups,
        injector=InjectorSpec(type="callback", callback=gid),
    )


def _pull(gid: str, groups: tuple[str, ...] = ()) -> EntityConfig:
    return EntityConfig(gid=gid, role=Role.MAIN, delivery=Delivery.PULL, groups=groups)


@pytest.fixture
def two_hosts(
    kafka: BrokerHandle, tmp_path: Path
) -> Iterator[tuple[GatewayParts, GatewayParts, Recorder]]:
    # C: a host of the fleet (its key trusted) with no gateway here, for a receipt it signs
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B", "C"))
    rec = Recorder()
    rec.signers = fleet.signers

    def cfg(host: str, entities: tuple[EntityConfig, ...]) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            store_url=f"sqlite:///{tmp_path / (host + '.sqlite')}",
            topic_prefix=fleet.prefix,
            inject_deadline_s=10,
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            sweep_interval_s=0.5,
            entities=entities,
        )

    a = build_gateway(
        cfg("A", (_pull("main-a"), _pull("main-a2", ("g",)), _inject("worker-a"))),
        signer=fleet.signers["A"],
        trust=fleet.trust,
        callbacks={"worker-a": rec},
    )
    b = build_gateway(
        cfg("B", (_inject("worker-b"), _inject("worker-b2", ("g",)))),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": rec, "worker-b2": rec},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        everyone = ("main-a", "main-a2", "worker-a", "worker-b", "worker-b2")
        wait_until(  # each host's mirror holds every entity, its own too (a broadcast counts
            # the hosts with a live member: A's own main-a2 must be there, not only B's)
            lambda: all(p.client.knows(g) for p in (a, b) for g in everyone),
            timeout_s=30,
            what="presence of both hosts",
        )
        yield a, b, rec
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _drain(parts: GatewayParts, gid: str, want: int, timeout: float = 20, **kw: Any) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(parts.client.poll(gid, **kw))
        time.sleep(0.01)
    return got


def test_brief_is_injected_then_injected_receipt_and_reply_reach_the_main(two_hosts: Any) -> None:
    """R-ACK-4: forward path commits, injects, publishes INJECTED correlated to msgId."""
    a, b, rec = two_hosts
    sent = [
        a.client.send(sender="main-a", to="worker-b", body=f"brief {i}".encode()) for i in range(5)
    ]
    wait_until(lambda: len(rec.of("worker-b")) == 5, timeout_s=20, what="5 injects")
    assert [g[3] for g in rec.of("worker-b")] == [f"brief {i}".encode() for i in range(5)]
    assert [g[2] for g in rec.of("worker-b")] == [e.msg_id for e in sent]
    b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"done")
    got = _drain(a, "main-a", 6)
    receipts = [m for m in got if m.kind == "INJECTED"]
    assert len(receipts) == 5
    from pipeline.envelope.receipts import read_receipt

    assert {read_receipt("INJECTED", m.body).msg_id for m in receipts} == {e.msg_id for e in sent}
    assert [m.body for m in got if m.kind == "REPLY"] == [b"done"]
    time.sleep(1.0)
    assert len(rec.of("worker-b")) == 5, "no brief is ever injected twice"


def test_a_burst_of_injects_sends_its_receipts_in_one_record_and_the_main_holds_each(
    two_hosts: Any, kafka: BrokerHandle
) -> None:
    """R-ACK-4 with RECEIPTS (docs/envelope.md): A's signed presence says it takes them, so the
    INJECTEDs of one inject burst at B for main-a travel as one record on A's inbox topic; A
    holds each as the INJECTED it stands for and settles each tracked send."""
    from confluent_kafka import Consumer, TopicPartition
    from sqlalchemy import select

    from pipeline.envelope.receipts import read_receipt
    from pipeline.host.tracking import forward_table

    a, b, rec = two_hosts
    wait_until(lambda: b.roster.takes("A", "RECEIPTS"), timeout_s=10, what="A's takes, read")
    rec.hold = gate = threading.Event()  # the first inject waits: the rest queue behind it
    sent = [a.client.send(sender="main-a", to="worker-b", body=b"brief %d" % i) for i in range(5)]
    assert rec.holding.wait(20), "the first brief reached worker-b"
    wait_until(  # B's inbox took all five: those not in the first burst wait behind it
        lambda: b.registry.get_sample_value(
            "fleet_consumer_records_total", {"group": b.runtime.config.group_id, "outcome": "ack"}
        ) == 5, timeout_s=20, what="five briefs consumed at B",
    )  # fmt: skip
    gate.set()
    wait_until(lambda: len(rec.of("worker-b")) == 5, timeout_s=20, what="5 injects")
    got = _drain(a, "main-a", 5)
    assert sorted(read_receipt("INJECTED", m.body).msg_id for m in got) == sorted(
        e.msg_id for e in sent
    ), "one INJECTED held per brief, each about its own brief"
    assert all(m.kind == "INJECTED" for m in got)
    with a.engine.connect() as c:
        states = {r.msg_id: r.state for r in c.execute(select(forward_table))}
    assert states == {e.msg_id: "injected" for e in sent}
    # on the wire: at most two bursts (what was queued when the first inject began, and what
    # queued behind it), each one record: a RECEIPTS, or a lone INJECTED for a burst of one
    (topic,) = [t for t in a.runtime.config.topics if t.endswith(".inbox.A")]
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "look"})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        kinds = []
        for m in consumer.consume(50, timeout=5):
            if m.error() is None:
                kinds.append(dict(m.headers() or [])["kind"].decode())
    finally:
        consumer.close()
    assert "RECEIPTS" in kinds and len(kinds) <= 2 and set(kinds) <= {"RECEIPTS", "INJECTED"}
    batched = 5 - kinds.count("INJECTED")
    assert b.registry.get_sample_value("fleet_gateway_receipts_batched_total") == batched
    assert a.registry.get_sample_value("fleet_gateway_receipts_unpacked_total") == batched


def test_a_receipt_forged_by_an_agent_settles_nothing_and_is_dead_lettered(
    two_hosts: Any, kafka: BrokerHandle
) -> None:
    """R-ACK-4 / R-ACK-5: a tracked send is settled by its recipient's gateway alone. An agent's
    INJECTED and FAILED about another's brief, signed by the agent's own host as a gateway whose
    socket took any kind (v0.12) would sign them, are dead-lettered UNKNOWN_KIND at the sender's
    gateway: the brief stays pending, nothing is held, and its real INJECTED still settles it."""
    from confluent_kafka import Producer
    from sqlalchemy import select

    from pipeline.envelope import Envelope, encode
    from pipeline.envelope.receipts import failed_receipt, injected_body, read_receipt
    from pipeline.failures import dlq_ops
    from pipeline.host.tracking import forward_table
    from pipeline.kafka.settings import producer_config
    from pipeline.kafka.topics import TopicNames

    a, b, rec = two_hosts
    rec.hold = gate = threading.Event()  # the real inject waits while the forgeries arrive
    sent = a.client.send(sender="main-a", to="worker-b", body=b"brief")
    assert rec.holding.wait(20), "the brief reached worker-b"
    forged = [
        Envelope.new(kind=Kind.INJECTED, sender="worker-b", to="main-a", ttl_s=60,
                     body=injected_body(sent.msg_id, "worker-b")),
        failed_receipt(about=sent.msg_id, recipient="worker-b", sender="worker-b", to="main-a",
                       reason="INJECT_FAILED", error="forged", stage="inject", ttl_s=60,
                       trace_id=sent.trace_id),
    ]  # fmt: skip
    topics = TopicNames(prefix=a.runtime.config.topics[0].removesuffix("inbox.A"))
    producer = Producer(producer_config(kafka.bootstrap))
    for env in forged:
        key, headers, value = encode(
            env, topic=topics.inbox("A"), signer=b.client.publisher.signer
        )
        producer.produce(topics.inbox("A"), key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    ids = {env.msg_id for env in forged}

    def dead() -> list[Any]:
        return [d for d in dlq_ops.scan(kafka.bootstrap, topics.dlq) if d.msg_id in ids]

    wait_until(lambda: len(dead()) == 2, timeout_s=30, what="both forgeries dead-lettered")
    assert {d.reason for d in dead()} == {"UNKNOWN_KIND"}
    with a.engine.connect() as c:
        assert c.execute(select(forward_table.c.state)).scalars().all() == ["pending"]
    assert a.client.poll("main-a") == [], "nothing forged was held"
    gate.set()
    [receipt] = _drain(a, "main-a", 1)
    assert receipt.kind == "INJECTED" and receipt.sender == "B._gateway"
    assert read_receipt("INJECTED", receipt.body).msg_id == sent.msg_id
    with a.engine.connect() as c:
        assert c.execute(select(forward_table.c.state)).scalars().all() == ["injected"]


def test_an_injected_signed_by_a_host_the_brief_did_not_go_to_settles_nothing(
    two_hosts: Any, kafka: BrokerHandle
) -> None:
    """R-ACK-4 / R-ACK-5: only the host a brief went to can have injected it. An INJECTED
    about main-a's brief to worker-b (on B), signed by host C's gateway key, is dead-lettered
    SIGNER_MISMATCH at A: the brief stays pending, nothing is held, B's INJECTED settles it."""
    from confluent_kafka import Producer
    from sqlalchemy import select

    from pipeline.envelope import Envelope, encode
    from pipeline.envelope.receipts import injected_body
    from pipeline.failures import dlq_ops
    from pipeline.host.tracking import forward_table
    from pipeline.kafka.settings import producer_config
    from pipeline.kafka.topics import TopicNames

    a, _b, rec = two_hosts
    rec.hold = gate = threading.Event()
    sent = a.client.send(sender="main-a", to="worker-b", body=b"brief")
    assert rec.holding.wait(20), "the brief reached worker-b"
    forged = Envelope.new(kind=Kind.INJECTED, sender="C._gateway", to="main-a", ttl_s=60,
                          body=injected_body(sent.msg_id, "worker-b"))  # fmt: skip
    topics = TopicNames(prefix=a.runtime.config.topics[0].removesuffix("inbox.A"))
    producer = Producer(producer_config(kafka.bootstrap))
    key, headers, value = encode(forged, topic=topics.inbox("A"), signer=rec.signers["C"])
    producer.produce(topics.inbox("A"), key=key, value=value, headers=headers)
    assert producer.flush(30) == 0

    def dead() -> list[Any]:
        return [d for d in dlq_ops.scan(kafka.bootstrap, topics.dlq) if d.msg_id == forged.msg_id]

    wait_until(lambda: len(dead()) == 1, timeout_s=30, what="the forgery dead-lettered")
    assert dead()[0].reason == "SIGNER_MISMATCH"
    with a.engine.connect() as c:
        rows = c.execute(select(forward_table.c.state, forward_table.c.host)).all()
    assert [tuple(r) for r in rows] == [("pending", "B")]
    assert a.client.poll("main-a") == [], "nothing forged was held"
    gate.set()
    [receipt] = _drain(a, "main-a", 1)
    assert receipt.kind == "INJECTED" and receipt.sender == "B._gateway"
    with a.engine.connect() as c:
        assert c.execute(select(forward_table.c.state)).scalars().all() == ["injected"]


def test_a_worker_s_brief_to_a_worker_is_settled_by_its_injected(two_hosts: Any) -> None:
    """R-ACK-5: a worker that briefs another worker is told INJECTED, never a FAILED
    INJECT_TIMEOUT for a brief that was injected: its INJECTED is injected into it and settles
    its tracked send, as a main's poll does."""
    from sqlalchemy import select

    from pipeline.host.tracking import forward_table

    a, _b, rec = two_hosts
    sent = a.client.send(sender="worker-a", to="worker-b", body=b"brief")
    wait_until(lambda: rec.of("worker-a", "INJECTED"), timeout_s=20, what="INJECTED into worker-a")
    [(_, _, _, body)] = rec.of("worker-a", "INJECTED")
    assert sent.msg_id.encode() in body, body  # the worker reads it rendered, naming the brief
    with a.engine.connect() as c:
        rows = c.execute(select(forward_table.c.msg_id, forward_table.c.state)).all()
    assert [tuple(r) for r in rows] == [(sent.msg_id, "injected")]


def test_a_worker_s_brief_past_its_deadline_is_one_failed_injected_into_it(two_hosts: Any) -> None:
    """R-ACK-5: no INJECTED in time is one FAILED at the sender. A worker never drains held
    rows, so its INJECT_TIMEOUT is injected into it by its own gateway's deadline duty, not
    held where it is never read. (The brief waits in worker-b's injector; the deadline is moved
    into the past in A's store instead of waiting out inject_deadline_s + clock_skew_s.)"""
    from sqlalchemy import select, update

    from pipeline.host.tracking import forward_table

    a, _b, rec = two_hosts
    rec.hold = gate = threading.Event()
    sent = a.client.send(sender="worker-a", to="worker-b", body=b"brief")
    try:
        assert rec.holding.wait(20), "the brief reached worker-b"
        with a.engine.begin() as c:  # just past: far past, retention purges the settled row
            c.execute(update(forward_table).values(deadline_ms=int(time.time() * 1000) - 1))
        wait_until(lambda: rec.of("worker-a", "FAILED"), timeout_s=20, what="FAILED into worker-a")
    finally:
        gate.set()
    [(_, _, _, body)] = rec.of("worker-a", "FAILED")
    assert sent.msg_id.encode() in body and b"INJECT_TIMEOUT" in body, body
    assert a.client.poll("worker-a") == [], "held for a worker, where it is never read"
    with a.engine.connect() as c:
        rows = c.execute(select(forward_table.c.state, forward_table.c.reason)).all()
    assert [tuple(r) for r in rows] == [("failed", "INJECT_TIMEOUT")]


def test_ask_without_open_pull_gets_no_waiter_in_one_round_trip(two_hosts: Any) -> None:
    """R-CONV-1: the main's gateway answers NO_WAITER on arrival when nobody pulls."""
    a, b, rec = two_hosts
    ask = b.client.ask(sender="worker-b", to="main-a", body=b"which branch?")
    wait_until(
        lambda: rec.of("worker-b", "NO_WAITER"),
        timeout_s=20,
        what="NO_WAITER injected into the asker",
    )
    assert a.client.poll("main-a") == [], "an unanswerable ASK is not held"
    with b.client.sessions() as s:
        from pipeline.host.conversations import Conversations

        assert not Conversations.turn_waiting(s, str(ask.turn_id)), "NO_WAITER ends the turn"


def test_ask_surfaces_on_open_pull_and_late_answer_gets_too_late(two_hosts: Any) -> None:
    """R-CONV-2: an ASK surfaces on the open pull; an ANSWER after the turn ended ->
    TOO_LATE back to the answerer, and nothing is injected."""
    a, b, rec = two_hosts
    got: list[Any] = []
    puller = threading.Thread(target=lambda: got.extend(a.client.poll("main-a", wait_s=20)))
    puller.start()
    time.sleep(0.5)  # the open pull is registered
    ask = b.client.ask(sender="worker-b", to="main-a", body=b"q?")
    puller.join(25)
    assert [m.kind for m in got] == ["ASK"] and got[0].turn_id == ask.turn_id
    # answered in time -> injected into the asking worker
    a.client.answer(sender="main-a", to="worker-b", turn_id=str(ask.turn_id), body=b"main")
    wait_until(lambda: rec.of("worker-b", "ANSWER"), timeout_s=20, what="ANSWER injected")
    # a second answer to the same (now answered) turn is too late
    a.client.answer(sender="main-a", to="worker-b", turn_id=str(ask.turn_id), body=b"again")
    late = _drain(a, "main-a", 1, kinds=["TOO_LATE"])
    assert [m.kind for m in late] == ["TOO_LATE"] and late[0].turn_id == ask.turn_id
    assert len(rec.of("worker-b", "ANSWER")) == 1


def test_broadcast_reaches_each_group_member_exactly_once(two_hosts: Any) -> None:
    """R-TOP-6: one record per host keyed broadcast.<group>; the gateway fans out locally."""
    a, _b, rec = two_hosts
    hosts = a.client.broadcast(sender="main-a", group="g", body=b"all hands")
    assert hosts == 2
    wait_until(
        lambda: rec.of("worker-b2", "BROADCAST"), timeout_s=20, what="broadcast injected on B"
    )
    held = _drain(a, "main-a2", 1)
    time.sleep(1.0)
    held += a.client.poll("main-a2")
    assert [m.body for m in held] == [b"all hands"]
    assert len(rec.of("worker-b2", "BROADCAST")) == 1
    assert rec.of("worker-b", "BROADCAST") == [], "non-members get nothing"
    assert a.client.poll("main-a") == []


def test_unknown_recipient_is_an_immediate_error(two_hosts: Any) -> None:
    """R-TOP-5: an unroutable send is a fast error, not a black hole."""
    a, _b, _rec = two_hosts
    with pytest.raises(DeliveryError) as info:
        a.client.send(sender="main-a", to="nobody-anywhere", body=b"x")
    assert info.value.reason == "UNKNOWN_RECIPIENT"


def test_tampered_copies_of_an_applied_message_are_dead_lettered_not_deduped(
    kafka: BrokerHandle, two_hosts: Any
) -> None:
    """R-ENV-3: verification (signature, signer, to, expiry) comes BEFORE the seen-set.
    A tampered copy of an already-applied message, carrying its msgId, is a dead letter with its
    verification reason, never a silent dedupe hit; only an exact redelivery (which verifies)
    is dropped and counted."""
    from confluent_kafka import Producer

    from pipeline.failures import dlq_ops
    from pipeline.kafka.settings import producer_config
    from pipeline.kafka.topics import TopicNames

    from .dlq_helpers import read_all

    a, b, _rec = two_hosts
    sent = b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"done")
    assert [m.body for m in _drain(a, "main-a", 1)] == [b"done"]
    topics = TopicNames(prefix=a.runtime.config.topics[0].removesuffix("inbox.A"))
    [orig] = read_all(kafka.bootstrap, topics.inbox("A"), 1)
    headers = list(orig.headers())
    assert dict(headers)["msgId"] == sent.msg_id.encode()
    flipped = orig.value()[:-1] + bytes([orig.value()[-1] ^ 1])
    copies = {
        "flipped body": (headers, flipped, "SIG_INVALID"),
        "stripped signature": ([h for h in headers if h[0] != "sig"], orig.value(), "NOT_SIGNED"),
        "2000 junk headers": (
            headers + [(f"junk{i}", b"x") for i in range(2000)],
            orig.value(),
            "TOO_LARGE",
        ),
        "empty value": (headers, b"", "SIG_INVALID"),
    }
    group = a.runtime.config.group_id
    hits = a.registry.get_sample_value("fleet_dedupe_hits_total", {"group": group}) or 0.0
    producer = Producer(producer_config(kafka.bootstrap))
    for copy_headers, value, _reason in copies.values():
        producer.produce(topics.inbox("A"), key=orig.key(), value=value, headers=copy_headers)
    producer.produce(topics.inbox("A"), key=orig.key(), value=orig.value(), headers=headers)
    assert producer.flush(30) == 0

    def dead() -> list[Any]:
        return [d for d in dlq_ops.scan(kafka.bootstrap, topics.dlq) if d.msg_id == sent.msg_id]

    wait_until(
        lambda: len(dead()) == len(copies), timeout_s=30, what="every tampered copy dead-lettered"
    )
    wait_until(
        lambda: (
            a.registry.get_sample_value("fleet_dedupe_hits_total", {"group": group}) == hits + 1
        ),
        timeout_s=30,
        what="the exact redelivery counted as a dedupe hit",
    )
    letters = dead()
    assert sorted(d.reason for d in letters) == sorted(r for _h, _v, r in copies.values())
    assert all(d.verified is False for d in letters)  # a forged from is never answered
    for reason in {r for _h, _v, r in copies.values()}:
        assert (
            a.registry.get_sample_value(
                "fleet_gateway_verification_failures_total", {"reason": reason}
            )
            or 0
        ) >= 1
    time.sleep(0.5)
    assert a.client.poll("main-a") == [], "nothing was applied twice"
    assert a.registry.get_sample_value("fleet_dedupe_hits_total", {"group": group}) == hits + 1


def test_the_gateway_reports_its_cpu_per_thread_role_and_names_its_threads(
    two_hosts: Any,
) -> None:
    """Which loop spends the CPU is ``fleet_thread_cpu_seconds_total{thread}``, read from the
    kernel for the threads that did the work, labelled by role (R-OBS-5: bounded labels, one
    ``inject-worker`` however many workers), and the gateway's threads carry their names in the
    kernel (``top -H``, ``perf``)."""
    import os

    from pipeline.support import procfs

    a, b, rec = two_hosts
    for i in range(20):
        a.client.send(sender="main-a", to="worker-b", body=f"brief {i}".encode())
    wait_until(lambda: len(rec.of("worker-b")) == 20, timeout_s=30, what="20 injects")

    def cpu(role: str) -> float:
        return b.registry.get_sample_value("fleet_thread_cpu_seconds_total", {"thread": role}) or 0

    wait_until(  # the tick names the threads; the counters read what each thread spent
        lambda: cpu("gw-inbox") > 0 and cpu("inject-worker") > 0 and cpu("librdkafka") > 0,
        timeout_s=20,
        what="CPU seen on the inbox, the inject worker and librdkafka's threads",
    )
    names = {procfs.thread_name(os.getpid(), t) for t in procfs.thread_ids(os.getpid()) or ()}
    assert {"gw-inbox", "gw-relay", "gw-maintenance", "gw-socket-reade"} <= names  # 15 bytes
