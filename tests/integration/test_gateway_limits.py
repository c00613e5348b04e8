"""Caps and expiry on the gateway's pull path (R-HOLD-3), on a real broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.envelope import Kind
from pipeline.failures.dlq import read_dead_letter
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.settings import consumer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka


def _main(gid: str) -> EntityConfig:
    return EntityConfig(gid=gid, role=Role.MAIN, delivery=Delivery.PULL)


@pytest.fixture
def pair(kafka: BrokerHandle, tmp_path: Path) -> Iterator[tuple[GatewayParts, GatewayParts, Fleet]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))

    def cfg(host: str, gid: str, **kw: Any) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            topic_prefix=fleet.prefix,
            store_url=f"sqlite:///{tmp_path / (host + '.sqlite')}",
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            sweep_interval_s=0.2,
            entities=(_main(gid),),
            **kw,
        )

    a = build_gateway(cfg("A", "main-a"), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        cfg("B", "main-b", max_held_per_recipient=5), signer=fleet.signers["B"], trust=fleet.trust
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: a.client.knows("main-b"), timeout_s=30, what="main-b in A's roster")
        yield a, b, fleet
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _dead_letters(bootstrap: str, prefix: str, want: int, timeout: float = 30) -> list[Any]:
    c = Consumer(consumer_config(bootstrap, unique_name("test.dlq")))
    c.subscribe([TopicNames(prefix=prefix).dlq])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(read_dead_letter(m))
    c.close()
    return got


def test_held_cap_dead_letters_the_overflow_and_loses_nothing(pair: Any) -> None:
    """R-HOLD-3 'inbox caps': overflow dead-letters (never vanishes) with a reason."""
    a, b, fleet = pair
    sent = [
        a.client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=f"{i}".encode())
        for i in range(8)
    ]
    letters = _dead_letters(fleet.bootstrap, fleet.prefix, 3)
    held = b.client.poll("main-b")
    assert len(held) == 5 and {m.msg_id for m in held} < {e.msg_id for e in sent}
    assert [d.reason for d in letters] == ["HELD_CAP_EXCEEDED"] * 3
    assert {d.msg_id for d in letters} | {m.msg_id for m in held} == {e.msg_id for e in sent}


def test_sweeper_dead_letters_held_messages_past_expiry(pair: Any) -> None:
    """R-EXP-2: a sweeper removes held messages past expiresAt, so an abandoned
    sender's backlog cannot wedge an inbox; each goes to the DLQ as EXPIRED."""
    a, b, fleet = pair
    short = a.client.send(
        sender="main-a", to="main-b", kind=Kind.REPLY, body=b"soon stale", ttl_s=2.0
    )
    keep = a.client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"fresh")

    def pending() -> int:
        with b.client.reads() as s:
            return b.client.held.pending_count(s, "main-b")

    wait_until(lambda: pending() == 2, timeout_s=20, what="both held")
    letters = _dead_letters(fleet.bootstrap, fleet.prefix, 1, timeout=30)
    assert [(d.msg_id, d.reason) for d in letters] == [(short.msg_id, "EXPIRED")]
    assert [m.msg_id for m in b.client.poll("main-b")] == [keep.msg_id]
