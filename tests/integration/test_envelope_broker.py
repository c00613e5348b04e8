"""On a real broker: signed records through Kafka, verified at the receiving
host against a roster rebuilt from the real compacted topic (R-ENV-3, R-PRES-2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from pipeline import schemas
from pipeline.envelope import Envelope, Kind, Signer, codec_for, encode, sign_fields
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.presence import (
    Delivery,
    PresenceEntry,
    PresencePublisher,
    Role,
    RosterFollower,
    RosterView,
    SpawnProfile,
    presence_record,
)
from pipeline.testing import BrokerHandle, unique_name
from tests.envelope_kit import Fleet

pytestmark = pytest.mark.kafka


class Net:
    """Three hosts on one real broker, each with a verifier fed by a real roster follower."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topics = TopicNames(prefix=unique_name("test.env") + ".")
        apply_topology(bootstrap, TopologySpec(hosts=("a", "b", "c"), topics=self.topics,
                                               inbox_partitions=3))  # fmt: skip
        self.fleet = Fleet(topics=self.topics)
        self.fleet.now = 0  # not used: real clocks below
        self.producer = Producer(producer_config(bootstrap))
        self.publishers = {
            h: PresencePublisher(
                producer=self.producer,
                signer=self.fleet.signers[h],
                topics=self.topics,
                interval_s=3600,
                profiles=[SpawnProfile(name="default")],
            )
            for h in ("a", "b", "c")
        }
        self.publishers["a"].register("w-a", role=Role.WORKER, delivery=Delivery.INJECT)
        self.publishers["b"].register("m-b", role=Role.MAIN, delivery=Delivery.PULL)
        for p in self.publishers.values():
            p.heartbeat()
        assert self.producer.flush(30) == 0
        self.followers: list[RosterFollower] = []

    def verifier(self, host: str) -> Any:
        from pipeline.envelope import BoundedSeenSet, Verifier

        view = RosterView.build(trust=self.fleet.trust, topics=self.topics)
        follower = RosterFollower(bootstrap=self.bootstrap, view=view, topics=self.topics)
        follower.catch_up()
        self.followers.append(follower)
        return Verifier(host=host, trust=self.fleet.trust, presence=view,
                        seen=BoundedSeenSet(), topics=self.topics)  # fmt: skip

    def send(self, topic: str, key: bytes | None, headers: Any, value: bytes | None) -> None:
        self.producer.produce(topic, key=key, value=value, headers=headers)
        assert self.producer.flush(30) == 0

    def signed(self, env: Envelope, *, signer: str, host: str) -> tuple[str, bytes, Any, bytes]:
        topic = self.topics.inbox(host)
        key, headers, value = encode(env, topic=topic, signer=self.fleet.signers[signer])
        return topic, key, headers, value

    def read(self, topic: str, n: int, timeout: float = 30.0) -> list[Any]:
        consumer = Consumer(consumer_config(self.bootstrap, unique_name("test.group")))
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        consumer.close()
        assert len(got) == n, f"read {len(got)} of {n} from {topic}"
        return sorted(got, key=lambda m: (m.partition(), m.offset()))

    def close(self) -> None:
        for f in self.followers:
            f.stop()


@pytest.fixture
def net(kafka: BrokerHandle) -> Iterator[Net]:
    n = Net(kafka.bootstrap)
    yield n
    n.close()


def env(**kw: Any) -> Envelope:
    args: dict[str, Any] = {"kind": Kind.SEND, "sender": "w-a", "to": "m-b", "body": b"brief",
                            "ttl_s": 300}  # fmt: skip
    return Envelope.new(**{**args, **kw})


def outcome(verifier: Any, msg: Any) -> str:
    """What a consumer loop does with one record: verify, and on any failure keep its reason."""
    try:
        got = verifier.verify(topic=msg.topic(), key=msg.key(), headers=msg.headers(),
                              value=msg.value())  # fmt: skip
    except EnvelopeError as exc:
        assert exc.raw["value"] == msg.value()  # the raw record survives for the DLQ
        return exc.reason
    codec = codec_for(got.envelope.kind)
    try:
        codec.deserialize(got.envelope.body, got.envelope.kind)
    except EnvelopeError as exc:
        return exc.reason
    return "OK"


def test_signed_by_a_for_gid_on_b_verifies_at_b(net: Net) -> None:
    e = env(turn_id="t-1")
    net.send(*net.signed(e, signer="a", host="b"))
    [msg] = net.read(net.topics.inbox("b"), 1)
    got = net.verifier("b").verify(topic=msg.topic(), key=msg.key(), headers=msg.headers(),
                                   value=msg.value())  # fmt: skip
    assert got.envelope == e and got.signer_host == "a"


def test_copied_to_another_inbox_or_rekeyed_is_to_mismatch(net: Net) -> None:
    net.send(*net.signed(env(), signer="a", host="b"))
    [orig] = net.read(net.topics.inbox("b"), 1)
    net.send(net.topics.inbox("c"), orig.key(), orig.headers(), orig.value())  # copied
    net.send(net.topics.inbox("b"), b"m-other", orig.headers(), orig.value())  # re-keyed
    [copied] = net.read(net.topics.inbox("c"), 1)
    assert outcome(net.verifier("c"), copied) == r.TO_MISMATCH
    rekeyed = [m for m in net.read(net.topics.inbox("b"), 2) if m.key() == b"m-other"]
    assert outcome(net.verifier("b"), rekeyed[0]) == r.TO_MISMATCH


def test_from_not_on_the_signing_host_is_signer_mismatch(net: Net) -> None:
    net.send(*net.signed(env(), signer="c", host="b"))  # c claims to speak for w-a (on a)
    [msg] = net.read(net.topics.inbox("b"), 1)
    assert outcome(net.verifier("b"), msg) == r.SIGNER_MISMATCH


def test_unknown_key(net: Net) -> None:
    rogue = Signer.generate("d")
    topic = net.topics.inbox("b")
    key, headers, value = encode(env(), topic=topic, signer=rogue)
    net.send(topic, key, headers, value)
    [msg] = net.read(topic, 1)
    assert outcome(net.verifier("b"), msg) == r.UNKNOWN_KEY


def test_bad_inputs_each_give_their_reason_and_never_escape_the_loop(net: Net) -> None:
    topic = net.topics.inbox("b")
    a = net.fleet.signers["a"]
    good = env()
    _, key, headers, value = net.signed(good, signer="a", host="b")

    def raw(fields: dict[str, bytes], body: bytes = b"brief") -> list[tuple[str, bytes]]:
        return sign_fields(fields, topic=topic, body=body, signer=a)

    fields = env().header_fields()
    inj = schemas.encode("injected", {"msg_id": "m", "recipient": "w-a", "injected_at_ms": 1})
    # truncated Avro, validly signed by host a for its gateway (a receipt is a gateway's alone)
    inj_env = env(kind=Kind.INJECTED, sender="a._gateway", body=inj[:-1])
    _, ekey, eheaders, _ = net.signed(env(body=b""), signer="a", host="b")
    cases: list[tuple[str, Any, Any, bytes | None]] = [
        (r.NOT_SIGNED, key, None, b"brief"),
        (r.MALFORMED_HEADERS, key, [h for h in headers if h[0] != "msgId"], value),
        (r.MALFORMED_HEADERS, key, [*headers, headers[2]], value),
        (r.TOO_LARGE, key, [*headers, ("x-pad", b"p" * 9000)], value),
        (r.UNKNOWN_KIND, key, raw(fields | {"kind": b"NUKE"}), b"brief"),
        (r.UNSUPPORTED_VERSION, key, raw(fields | {"v": b"9"}), b"brief"),
        (r.MALFORMED_HEADERS, key, raw(fields | {"traceId": b"\xc3\x28"}), b"brief"),
        (r.SCHEMA_INVALID, *net.signed(inj_env, signer="a", host="b")[1:]),
        (r.SIG_INVALID, key, headers, None),  # null value, but the signature covers "brief"
        ("OK", ekey, eheaders, None),  # null value = a signed empty body
        ("OK", key, headers, value),
    ]  # fmt: skip
    for _, k, h, v in cases:
        net.producer.produce(topic, key=k, value=v, headers=h)
    assert net.producer.flush(30) == 0
    verifier = net.verifier("b")
    msgs = net.read(topic, len(cases))
    by_partition_order = [outcome(verifier, m) for m in msgs]  # the loop never raises
    assert sorted(by_partition_order) == sorted(c[0] for c in cases)


def test_roster_rebuilt_from_the_topic_and_tombstoned_on_stop(net: Net) -> None:
    v = net.verifier("b")
    view = v.presence
    assert view.host_of("w-a") == "a" and view.host_of("m-b") == "b"
    assert set(view.hosts()) == {"a", "b", "c"}
    assert view.hosts()["a"].profiles[0].name == "default"
    # a rogue presence: c claims w-x lives on a -> rejected by every view
    rogue = PresenceEntry(gid="w-x", host="a", role=Role.WORKER,
                                         delivery=Delivery.INJECT, ts_ms=int(time.time() * 1000),
                                         ttl_ms=60_000)  # fmt: skip
    k, h, val = presence_record(rogue, signer=net.fleet.signers["c"], topics=net.topics)
    net.send(net.topics.roster, k, h, val)
    net.publishers["a"].stop()  # tombstones w-a and a._gateway
    fresh = net.verifier("c").presence
    assert fresh.host_of("w-x") is None and fresh.rejections[r.SIGNER_MISMATCH] == 1
    assert fresh.host_of("w-a") is None and "a" not in fresh.hosts()
    assert fresh.host_of("m-b") == "b"


def test_live_follower_sees_new_heartbeats(net: Net) -> None:
    view = RosterView.build(trust=net.fleet.trust, topics=net.topics)
    follower = RosterFollower(bootstrap=net.bootstrap, view=view, topics=net.topics).start()
    try:
        net.publishers["c"].register("w-new", role=Role.WORKER, delivery=Delivery.INJECT,
                                     groups=["ops"])  # fmt: skip
        net.producer.flush(30)
        deadline = time.monotonic() + 30
        while view.host_of("w-new") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert view.host_of("w-new") == "c"
        assert [e.gid for e in view.members("ops")] == ["w-new"]
    finally:
        follower.stop()


def test_fleet_roster_cli_lists_the_live_view(net: Net, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from pipeline.cli.main import app

    for signer in net.fleet.signers.values():
        signer.write_public(tmp_path / f"{signer.key_id}.pub")
    args = ["roster", "--bootstrap", net.bootstrap, "--trust-dir", str(tmp_path),
            "--prefix", net.topics.prefix]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    gids = {e["gid"]: e for e in data["entries"]}
    assert {"w-a", "m-b", "a._gateway", "b._gateway", "c._gateway"} <= set(gids)
    assert gids["m-b"]["host"] == "b" and gids["m-b"]["delivery"] == "pull"
    assert data["hosts"] == ["a", "b", "c"] and data["rejected"] == {}
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "w-a" in table.stdout
