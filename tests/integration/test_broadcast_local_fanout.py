"""A broadcast to a group with three members on one host and one on another (R-TOP-6: one
record per host, keyed ``broadcast.<group>``; the receiving gateway fans out to its local members).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.dlq_helpers import high_watermarks, read_all
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka

GROUP = "crew"
ON_B = ("worker-b1", "worker-b2", "main-b3")  # two inject members and one pull member
EVERYONE = ("main-a", "main-a2", *ON_B, "worker-bx")


class Injected:
    """The inject callbacks of host B's entities: (gid, kind, body) in arrival order."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        with self.lock:
            self.got.append((gid, kind, body))

    def bodies(self, gid: str) -> list[bytes]:
        with self.lock:
            return [b for g, k, b in self.got if g == gid and k == "BROADCAST"]


def _inject(gid: str, groups: tuple[str, ...]) -> EntityConfig:
    return EntityConfig(
        gid=gid,
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        groups=groups,
        injector=InjectorSpec(type="callback", callback=gid),
    )


def _pull(gid: str, groups: tuple[str, ...], role: Role = Role.MAIN) -> EntityConfig:
    return EntityConfig(gid=gid, role=role, delivery=Delivery.PULL, groups=groups)


@pytest.fixture
def hosts(
    kafka: BrokerHandle, tmp_path: Path
) -> Iterator[tuple[Fleet, GatewayParts, GatewayParts, Injected]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    rec = Injected()

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
        )

    a = build_gateway(
        cfg("A", (_pull("main-a", ()), _pull("main-a2", (GROUP,)))),
        signer=fleet.signers["A"],
        trust=fleet.trust,
    )
    b_entities = (
        _inject("worker-b1", (GROUP,)),
        _inject("worker-b2", (GROUP, "other")),
        _pull("main-b3", (GROUP,)),
        _inject("worker-bx", ("other",)),  # on the host, not in the group
    )
    b = build_gateway(
        cfg("B", b_entities),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={e.gid: rec for e in b_entities if e.delivery == Delivery.INJECT},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(
            lambda: all(p.client.knows(g) for p in (a, b) for g in EVERYONE),
            timeout_s=30,
            what="presence of both hosts",
        )
        yield fleet, a, b, rec
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _held(parts: GatewayParts, gid: str, want: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < want and time.monotonic() < deadline:
        got.extend(parts.client.poll(gid))
        time.sleep(0.02)
    time.sleep(1.0)  # a duplicate would arrive now
    return got + parts.client.poll(gid)


def test_three_members_on_one_host_and_one_on_another_each_get_it_exactly_once(
    hosts: tuple[Fleet, GatewayParts, GatewayParts, Injected],
) -> None:
    """R-TOP-6: two broadcasts to a group of four (three on B, one on A) are two records per
    broadcast, one per host; B fans each out locally, so every member gets each broadcast
    exactly once, in order, and nobody outside the group gets anything."""
    fleet, a, b, rec = hosts
    inbox_b = TopicNames(prefix=fleet.prefix).inbox("B")
    start = high_watermarks(fleet.bootstrap, inbox_b)
    bodies = [b"all hands 1", b"all hands 2"]
    assert [a.client.broadcast(sender="main-a", group=GROUP, body=x) for x in bodies] == [2, 2]

    for gid in ("worker-b1", "worker-b2"):
        wait_until(lambda g=gid: len(rec.bodies(g)) >= 2, timeout_s=20, what=f"{gid} injected")
    assert [m.body for m in _held(b, "main-b3", 2)] == bodies
    assert [m.body for m in _held(a, "main-a2", 2)] == bodies
    assert rec.bodies("worker-b1") == bodies
    assert rec.bodies("worker-b2") == bodies
    assert rec.bodies("worker-bx") == [], "a non-member on the members' host gets nothing"
    assert a.client.poll("main-a") == [], "the sender is no member"
    # one record per host and broadcast: the three deliveries on B came from local fan-out
    on_b = [
        m
        for m in read_all(fleet.bootstrap, inbox_b, 2, start=start, timeout_s=10)
        if m.key() == f"broadcast.{GROUP}".encode()
    ]
    assert sorted(m.value() for m in on_b) == bodies
    assert len(read_all(fleet.bootstrap, inbox_b, 3, start=start, timeout_s=3)) == 2


def test_the_gateway_runtimes_run_unordered_and_their_decision_dead_letters_poison(
    hosts: tuple[Fleet, GatewayParts, GatewayParts, Injected],
) -> None:
    """R-QUAR-1 applies to ordered flows only; docs/gateway.md states that the gateway's inbox
    (keyed by recipient, or ``broadcast.<group>`` as above) is not one, so one poison record
    never parks a recipient's later mail. This pins the setting that statement rests on."""
    from pipeline.runtime.decide import decide
    from pipeline.runtime.outcomes import DeadLetter, Quarantine, Retry

    _fleet, a, b, _rec = hosts
    for parts in (a, b):
        config = parts.runtime.config
        assert config.ordered is False, config
        policy = config.retry
        permanent = decide(
            Quarantine(reason="HANDLER_REJECTED"),
            attempt=1,
            policy=policy,
            ordered=config.ordered,
            keyed=True,
        )
        assert permanent == DeadLetter(reason="HANDLER_REJECTED")
        spent = decide(
            Retry(), attempt=policy.max_attempts, policy=policy, ordered=config.ordered, keyed=True
        )
        assert isinstance(spent, DeadLetter) and spent.reason == "RETRIES_EXHAUSTED"
