"""Bounded stores on a real broker: two gateways with a 1 s retention purge sent outbox rows and
drained held rows while traffic flows, and never an unsent outbox row, an undrained held message
or a dedupe row inside the R-STORE-1 horizon (``[retention]``, docs/store.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.presence.roles import Delivery, Role
from pipeline.retention import RetentionConfig
from pipeline.runtime.dedupe import dedupe_table
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka

SHORT = RetentionConfig(outbox_sent_s=1, held_drained_s=1, every_s=0.3, batch_rows=7)
MORE = 20  # messages sent after the first purges were seen on both hosts


def _pull(gid: str) -> EntityConfig:
    return EntityConfig(gid=gid, role=Role.MAIN, delivery=Delivery.PULL)


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[tuple[GatewayParts, GatewayParts]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))

    def cfg(host: str, entities: tuple[EntityConfig, ...]) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            store_url=f"sqlite:///{tmp_path / (host + '.sqlite')}",
            topic_prefix=fleet.prefix,
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            sweep_interval_s=0.2,
            entities=entities,
            retention=SHORT,
        )

    a = build_gateway(cfg("A", (_pull("main-a"),)), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        cfg("B", (_pull("main-b"), _pull("keep-b"))), signer=fleet.signers["B"], trust=fleet.trust
    )
    _stuck_branch(a.engine)
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: a.client.knows("keep-b"), timeout_s=30, what="presence of B at A")
        yield a, b
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _stuck_branch(engine: Engine) -> None:
    """A refused row (FAILED) and the row held back behind it (PENDING), both 100 s old: unsent,
    so never purged, however old."""
    old = time.time() - 100
    row = {"tenant": "t", "branch_key": "stuck", "topic": "nowhere", "key": b"k", "value": b"v"}
    with engine.begin() as conn:
        conn.execute(
            insert(outbox),
            [
                {**row, "lsn": 1, "status": int(RowStatus.FAILED), "created_at": old},
                {**row, "lsn": 2, "status": int(RowStatus.PENDING), "created_at": old},
            ],
        )


def _count(engine: Engine, table: Any, *where: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def _purged(parts: GatewayParts, table: str) -> float:
    value = parts.registry.get_sample_value("fleet_store_rows_purged_total", {"table": table})
    return value or 0.0


def test_short_retention_purges_sent_and_drained_rows_while_traffic_flows(
    hosts: tuple[GatewayParts, GatewayParts],
) -> None:
    """R-STORE-1: a key must outlive its record's redelivery, so B's dedupe rows (inside the
    default 8-day horizon) all stay; sent outbox rows and drained held rows go in batches."""
    a, b = hosts
    sent = {"main-b": 0, "keep-b": 0}
    drained: list[str] = []
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            drained.extend(m.msg_id for m in b.client.poll("main-b", limit=50))
            time.sleep(0.02)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:

        def send(to: str) -> None:
            a.client.send(sender="main-a", to=to, body=f"{to} {sent[to]}".encode())
            sent[to] += 1

        # traffic flows until both purges have run at least once, then MORE messages follow
        deadline = time.monotonic() + 60
        while not (_purged(a, "outbox") and _purged(b, "fleet_held")):
            assert time.monotonic() < deadline, "no purge while traffic flowed"
            send("main-b")
            if sent["main-b"] % 5 == 0:
                send("keep-b")
            time.sleep(0.05)
        for i in range(MORE):
            send("keep-b" if i % 5 == 0 else "main-b")
            time.sleep(0.05)
        total = sent["main-b"] + sent["keep-b"]
        wait_until(
            lambda: len(drained) == sent["main-b"],
            timeout_s=30,
            what="every main-b message drained",
        )
    finally:
        stop.set()
        drainer.join(5)
    assert len(set(drained)) == sent["main-b"]

    # every sent row of A goes; the refused row and the one behind it stay
    wait_until(
        lambda: _purged(a, "outbox") == total, timeout_s=30, what=f"A purges its {total} sent rows"
    )
    assert _count(a.engine, outbox) == 2
    assert _count(a.engine, outbox, outbox.c.status == int(RowStatus.FAILED)) == 1
    assert _count(a.engine, outbox, outbox.c.status == int(RowStatus.PENDING)) == 1
    # every drained message of B goes; keep-b's, never drained, all stay
    wait_until(
        lambda: _purged(b, "fleet_held") == sent["main-b"],
        timeout_s=30,
        what="B purges every drained row",
    )
    assert _count(b.engine, held_table) == sent["keep-b"]
    assert _count(b.engine, held_table, held_table.c.recipient == "keep-b") == sent["keep-b"]
    # dedupe rows are inside the horizon: none purged
    assert _count(b.engine, dedupe_table) == total
    assert _purged(b, "fleet_dedupe") == 0
    wait_until(
        lambda: (
            b.registry.get_sample_value("fleet_store_rows", {"table": "fleet_held"})
            == sent["keep-b"]
        ),
        timeout_s=10,
        what="the rows gauge after a pass",
    )
