"""The other side: a real departure is still noticed (real broker, gateways as
processes). R-PRES-3, R-PRES-6 (TTL liveness, signed tombstones) and R-PRES-4 (``from``
lives on the signing host)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import select

from pipeline import schemas
from pipeline.bootstrap.client import build_client
from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.envelope import Envelope, Kind, encode
from pipeline.errors import DeliveryError
from pipeline.failures.dlq import DLQ_HEADER
from pipeline.failures.dlq import SCHEMA as DLQ_SCHEMA
from pipeline.host.config import load_config
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import outbox
from pipeline.record_headers import unpack_headers
from pipeline.store import make_engine
from pipeline.support.clock import now_ms
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
MAIN_B = '[[entities]]\ngid = "main-b"\nrole = "main"\ndelivery = "pull"\n'


@pytest.fixture
def fleet(kafka: BrokerHandle, tmp_path: Path) -> Fleet:
    return Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))


@pytest.fixture
def procs() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for p in started:
        p.stop()


def _roster(config: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "roster", "--config", str(config), "--json", "--all"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    view: dict[str, Any] = json.loads(out.stdout)
    return view


def test_a_gateway_that_stops_heartbeating_lapses_after_its_ttl(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """kill -9 of B (no tombstones) with the broker up: A's follower keeps reading the roster,
    so main-b lapses one TTL after its last heartbeat and A's view is current, not STALE. Its
    binding is still known: a send to it is accepted (deadlines bound the wait)."""
    cfg_a = fleet.config_file("A", MAIN_A, presence_ttl_s=5.0)
    cfg_b = fleet.config_file("B", MAIN_B, presence_ttl_s=5.0)
    b = GatewayProcess(cfg_b, tmp_path / "B.log")
    procs += [GatewayProcess(cfg_a, tmp_path / "A.log").start(), b.start()]
    client = build_client(load_config(cfg_a), signer=fleet.signers["A"])
    wait_until(lambda: client.knows("main-b"), timeout_s=90, what="main-b live in A's roster")
    b.kill9()
    wait_until(lambda: not client.knows("main-b"), timeout_s=60, what="main-b to lapse at A")
    view = _roster(cfg_a)
    assert view["stale"] is False, view
    entries = {e["gid"]: e for e in view["entries"]}
    assert entries["main-b"]["live"] is False and entries["main-a"]["live"] is True
    assert entries["main-b"]["expires_ms"] < view["horizon_ms"]
    env = client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"later")
    assert env.to == "main-b"


def test_a_tombstoned_gid_is_unknown_recipient_at_once(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """With ``away_grace_s = 0`` a stop leaves (tombstones B's entries) rather than announcing
    them away: the next send is UNKNOWN_RECIPIENT well before the 30 s TTL would have lapsed
    them. (The default stop is a restart: tests/integration/test_restart_away.py.)"""
    cfg_a = fleet.config_file("A", MAIN_A)
    cfg_b = fleet.config_file("B", MAIN_B, extra="away_grace_s = 0")
    b = GatewayProcess(cfg_b, tmp_path / "B.log")
    procs += [GatewayProcess(cfg_a, tmp_path / "A.log").start(), b.start()]
    client = build_client(load_config(cfg_a), signer=fleet.signers["A"])
    wait_until(lambda: client.knows("main-b"), timeout_s=90, what="main-b live in A's roster")
    assert b.stop() == 0
    stopped_ms = now_ms()
    wait_until(lambda: client.binding("main-b") is None, timeout_s=60, what="the tombstone at A")
    with pytest.raises(DeliveryError) as info:
        client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"x")
    assert info.value.reason == "UNKNOWN_RECIPIENT"
    assert now_ms() < stopped_ms + 30_000, "retracted by the tombstone, not by the TTL"


def _dead_letter_reasons(url: str, topics: TopicNames) -> list[str]:
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as c:
            rows = c.execute(select(outbox.c.headers).where(outbox.c.topic == topics.dlq))
            reasons = []
            for row in rows:
                ctx = dict(unpack_headers(row.headers))[DLQ_HEADER]
                reasons.append(schemas.decode(DLQ_SCHEMA, bytes(ctx))["reason"])
            return reasons
    finally:
        engine.dispose()


def test_a_record_signed_by_a_claiming_a_gid_b_announced_is_signer_mismatch(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """R-PRES-4 on the binding: host A signs a message ``from`` main-b (announced
    by B) into B's inbox; B dead-letters it SIGNER_MISMATCH and holds nothing."""
    cfg_a = fleet.config_file("A", MAIN_A)
    cfg_b = fleet.config_file("B", MAIN_B)
    procs += [
        GatewayProcess(cfg_a, tmp_path / "A.log").start(),
        GatewayProcess(cfg_b, tmp_path / "B.log").start(),
    ]
    client_b = build_client(load_config(cfg_b), signer=fleet.signers["B"])
    wait_until(lambda: client_b.knows("main-a"), timeout_s=90, what="main-a live in B's roster")
    topics = TopicNames(prefix=fleet.prefix)
    env = Envelope.new(kind=Kind.REPLY, sender="main-b", to="main-b", body=b"forged", ttl_s=60)
    key, headers, value = encode(env, topic=topics.inbox("B"), signer=fleet.signers["A"])
    producer = Producer(producer_config(fleet.bootstrap))
    producer.produce(topics.inbox("B"), key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    url_b = load_config(cfg_b).store_url
    wait_until(lambda: _dead_letter_reasons(url_b, topics), timeout_s=60, what="B's dead letter")
    assert _dead_letter_reasons(url_b, topics) == ["SIGNER_MISMATCH"]
    assert client_b.poll("main-b") == []
