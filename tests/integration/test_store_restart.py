"""A PostgreSQL restart under a running gateway loses nothing (store reads retried).

R-ACK-2 pull path: every reply the receiving gateway acked is held exactly once. Here the
receiving gateway's store (real PostgreSQL) is stopped hard and started again while replies
flow over the real broker; dedupe, quarantine and inbox reads retry like writes, so the inbox
loop never dies and every reply is held once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from pipeline.bootstrap.gateway import build_gateway
from pipeline.envelope import Kind
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, _pg, start_test_postgres
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

N = 60


def _restart(data: Path, url: str) -> None:
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    _pg(["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])
    time.sleep(1.0)  # replies keep arriving while the store is down
    opts = f"-p {port} -k {data.parent} -c listen_addresses=127.0.0.1"
    _pg(
        [
            "pg_ctl",
            "-D",
            str(data),
            "-w",
            "-l",
            str(data.parent / "server.log"),
            "-o",
            opts,
            "start",
        ]
    )


def test_postgres_restart_under_a_running_gateway_loses_no_reply(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    pg = start_test_postgres()
    if pg.directory is None:
        pytest.skip("FLEET_TEST_PG_URL is a server this test must not restart")
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))

    def cfg(host: str, store: str, entities: tuple[EntityConfig, ...]) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            store_url=store,
            topic_prefix=fleet.prefix,
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            sweep_interval_s=0.5,
            entities=entities,
        )

    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    worker = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    a = build_gateway(cfg("A", pg.url, (main,)), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        cfg("B", f"sqlite:///{tmp_path / 'B.sqlite'}", (worker,)),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": lambda **_: None},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: b.client.knows("main-a"), timeout_s=30, what="presence of main-a at B")
        sent: list[str] = []
        restarted = threading.Event()

        def send_all() -> None:
            for i in range(N):
                env = b.client.send(
                    sender="worker-b", to="main-a", body=f"r{i}".encode(), kind=Kind.REPLY
                )
                sent.append(env.msg_id)
                if i == N // 3:
                    _restart(pg.directory, pg.url)  # type: ignore[arg-type]
                    restarted.set()
                time.sleep(0.02)

        sender = threading.Thread(target=send_all)
        sender.start()
        sender.join(120)
        assert restarted.is_set() and len(sent) == N

        held: list[str] = []

        def drained() -> bool:
            held.extend(m.msg_id for m in a.client.poll("main-a", limit=1000))
            return len(set(held)) >= N

        wait_until(drained, timeout_s=60, what="every reply held at A")
        time.sleep(1.0)
        held.extend(m.msg_id for m in a.client.poll("main-a", limit=1000))
        counts = Counter(held)
        assert set(counts) == set(sent)
        assert all(n == 1 for n in counts.values()), "a reply was held twice"
        status = a.gateway.status()
        assert status["fatal"] is None and status["loops"]["inbox"]["alive"], status
    finally:
        a.gateway.stop()
        b.gateway.stop()
        pg.close()
