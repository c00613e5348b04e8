"""The pairwise MAC mode on the real broker (docs/envelope.md "The pairwise MAC mode").

Two gateways with ``pairwise_mac = true`` learn each other's X25519 key from signed presence on
the roster and exchange conversation records MAC'd; reports stay Ed25519-signed. R-ENV-3
still holds: a tampered MAC'd record is dead-lettered with its reason, never applied.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.envelope import Kind
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka


class Injected:
    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        with self.lock:
            self.got.append((msg_id, body))


@pytest.fixture
def mac_hosts(
    kafka: BrokerHandle, tmp_path: Path
) -> Iterator[tuple[GatewayParts, GatewayParts, Injected, TopicNames]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    injected = Injected()

    def cfg(host: str, entities: tuple[EntityConfig, ...]) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            store_url=f"sqlite:///{tmp_path / (host + '.sqlite')}",
            topic_prefix=fleet.prefix,
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            sweep_interval_s=0.5,
            entities=entities,
            pairwise_mac=True,
        )

    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    worker = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    a = build_gateway(cfg("A", (main,)), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        cfg("B", (worker,)),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": injected},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(
            lambda: (
                a.client.knows("worker-b")
                and b.client.knows("main-a")
                and a.roster.current_agreement("B") is not None
                and b.roster.current_agreement("A") is not None
            ),
            timeout_s=30,
            what="presence and agreement keys of both hosts",
        )
        yield a, b, injected, TopicNames(prefix=fleet.prefix)
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _drain(parts: GatewayParts, gid: str, want: int, timeout: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(parts.client.poll(gid))
        time.sleep(0.01)
    return got


def _tag(msg: Any) -> str:
    names = [n for n, _ in msg.headers()]
    assert ("sig" in names) != ("mac" in names), names
    return "mac" if "mac" in names else "sig"


def test_two_gateways_exchange_mac_records_and_a_tampered_one_is_refused(
    kafka: BrokerHandle, mac_hosts: Any
) -> None:
    """Conversation records between two MAC-mode hosts travel MAC'd and are applied; INJECTED
    reports stay signed; copies with a flipped body, a stripped tag or a keyId naming another
    pair are dead letters (MAC_INVALID, NOT_SIGNED, UNKNOWN_PAIR), never applied or deduped."""
    from confluent_kafka import Producer

    from pipeline.failures import dlq_ops
    from pipeline.kafka.settings import producer_config

    from .dlq_helpers import read_all

    a, b, injected, topics = mac_hosts
    brief = a.client.send(sender="main-a", to="worker-b", body=b"brief over a pair")
    wait_until(
        lambda: [m for m, _ in injected.got] == [brief.msg_id],
        timeout_s=20,
        what="brief injected at B",
    )
    reply = b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"done")
    got = _drain(a, "main-a", 2)
    assert sorted(m.kind for m in got) == ["INJECTED", "REPLY"]
    assert [m.body for m in got if m.kind == "REPLY"] == [b"done"]

    [on_b] = read_all(kafka.bootstrap, topics.inbox("B"), 1)
    assert _tag(on_b) == "mac"
    a_key, b_key = a.roster.current_agreement("A"), a.roster.current_agreement("B")
    assert a_key is not None and b_key is not None
    assert dict(on_b.headers())["keyId"] == f"{a_key.key_id}/{b_key.key_id}".encode()
    on_a = read_all(kafka.bootstrap, topics.inbox("A"), 2)
    tags = {dict(m.headers())["kind"].decode(): _tag(m) for m in on_a}
    assert tags == {"INJECTED": "sig", "REPLY": "mac"}

    [orig] = [m for m in on_a if dict(m.headers())["kind"] == b"REPLY"]
    headers = list(orig.headers())
    assert dict(headers)["msgId"] == reply.msg_id.encode()
    flipped = orig.value()[:-1] + bytes([orig.value()[-1] ^ 1])
    other_pair = [(n, b"B.0000000000000000/A.0000000000000000" if n == "keyId" else v) for n, v in headers]  # fmt: skip
    copies = {
        "flipped body": (headers, flipped, "MAC_INVALID"),
        "stripped tag": ([h for h in headers if h[0] != "mac"], orig.value(), "NOT_SIGNED"),
        "another pair": (other_pair, orig.value(), "UNKNOWN_PAIR"),
    }
    producer = Producer(producer_config(kafka.bootstrap))
    for copy_headers, value, _reason in copies.values():
        producer.produce(topics.inbox("A"), key=orig.key(), value=value, headers=copy_headers)
    assert producer.flush(30) == 0

    def dead() -> list[Any]:
        return [d for d in dlq_ops.scan(kafka.bootstrap, topics.dlq) if d.msg_id == reply.msg_id]

    wait_until(
        lambda: len(dead()) == len(copies), timeout_s=30, what="every tampered copy dead-lettered"
    )
    assert sorted(d.reason for d in dead()) == sorted(r for _h, _v, r in copies.values())
    assert all(d.verified is False for d in dead())  # an unproven from is never answered
    for reason in ("MAC_INVALID", "UNKNOWN_PAIR"):
        assert (
            a.registry.get_sample_value(
                "fleet_gateway_verification_failures_total", {"reason": reason}
            )
            or 0
        ) >= 1
    assert a.client.poll("main-a") == [], "no tampered copy was applied"
