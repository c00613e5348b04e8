"""The exporter's store gauges against a live gateway pair on the real broker.

R-HOLD-1, pull path: replies to a main are held in its host's store until the main polls them;
the exporter, reading that store, must show exactly the undrained count and follow each drain.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.envelope import Kind
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import HeldStore
from pipeline.kafka.local.ports import free_ports
from pipeline.observability import ExporterConfig, SamplerConfig, build_exporter
from pipeline.observability.store_gauges import SqlStoreGauges
from pipeline.store import read_sessions
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet
from tests.integration.test_gateway_flows import Recorder, _inject, _pull

pytestmark = pytest.mark.kafka


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[tuple[GatewayParts, GatewayParts, str]]:
    """Host A runs a pull main; host B an injected worker. Yields A, B and A's store URL."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    urls = {h: f"sqlite:///{tmp_path / (h + '.sqlite')}" for h in ("A", "B")}

    def cfg(host: str, entity: object) -> GatewayConfig:
        return GatewayConfig(
            host=host,
            bootstrap=kafka.bootstrap,
            store_url=urls[host],
            topic_prefix=fleet.prefix,
            presence_interval_s=1.0,
            presence_ttl_s=30.0,
            entities=(entity,),  # type: ignore[arg-type]
        )

    a = build_gateway(cfg("A", _pull("main-a")), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        cfg("B", _inject("worker-b")),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": Recorder()},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: b.client.knows("main-a"), timeout_s=30, what="presence of host A at B")
        # and the other way: a reply from worker-b that reaches A before A has heard B's
        # presence is refused UNKNOWN_SENDER (R-ENV-3), never held
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=30, what="presence of host B at A")
        yield a, b, urls["A"]
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _gauges(port: int) -> dict[str, float]:
    """The exporter's unlabelled gauges ({} while it is not up yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {
        s.name: float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels
    }


def _held_gauge(port: int) -> float | None:
    return _gauges(port).get("fleet_held_messages")


def test_exporter_held_gauge_equals_undrained_rows_and_drops_after_a_poll(
    hosts: tuple[GatewayParts, GatewayParts, str], kafka: BrokerHandle
) -> None:
    """R-HOLD-1 pull path: held until drained. ``fleet_held_messages`` from the exporter is
    the main's undrained count, read from the gateway's live store, and falls with each poll."""
    a, b, store_a = hosts
    for i in range(5):
        b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=f"r{i}".encode())
    held = HeldStore(read_sessions(a.engine))

    def pending() -> int:
        with held.sessions() as session:
            return held.pending_count(session, "main-a")

    wait_until(lambda: pending() == 5, timeout_s=30, what="5 replies held at host A")
    exporter = build_exporter(
        ExporterConfig(
            bootstrap=kafka.bootstrap,
            port=free_ports(1)[0],
            sampler=SamplerConfig(groups_prefix="fleet.none.", dlq_topic=None, interval_s=0.2),
        ),
        store=SqlStoreGauges.from_urls([store_a]),
    )
    try:
        wait_until(
            lambda: _held_gauge(exporter.port) == 5.0, timeout_s=30, what="exporter shows 5 held"
        )
        drained = a.client.poll("main-a", limit=3)
        assert len(drained) == 3 and pending() == 2
        wait_until(
            lambda: _held_gauge(exporter.port) == 2.0, timeout_s=30, what="exporter shows 2 held"
        )
        rest = a.client.poll("main-a")
        assert sorted(m.body for m in [*drained, *rest]) == [f"r{i}".encode() for i in range(5)]
        wait_until(
            lambda: _held_gauge(exporter.port) == 0.0, timeout_s=30, what="exporter shows 0 held"
        )
        latest = exporter.sampler.latest
        assert latest is not None and latest.store is not None
        assert latest.store.held_messages == pending() == 0
    finally:
        exporter.stop()


def test_fleet_exporter_cli_sums_the_gateways_stores(
    hosts: tuple[GatewayParts, GatewayParts, str], kafka: BrokerHandle
) -> None:
    """``fleet exporter --store-url A --store-url B``: the four store gauges over both gateways'
    stores (held at A only; each gateway's outbox shipped by its own relay, so backlog 0)."""
    a, b, store_a = hosts
    store_b = store_a.replace("A.sqlite", "B.sqlite")
    for i in range(3):
        b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=f"r{i}".encode())
    port = free_ports(1)[0]
    args = ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    args += ["--groups-prefix", "fleet.none."]
    args += ["--interval", "0.2", "--dlq-topic", "", "--store-url", store_a, "--store-url", store_b]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "exporter", *args],
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    want = {
        "fleet_held_messages": 3.0,
        "fleet_quarantined_keys": 0.0,
        "fleet_outbox_backlog_rows": 0.0,
        "fleet_outbox_oldest_unsent_age_seconds": 0.0,
    }
    try:
        wait_until(
            lambda: {k: _gauges(port).get(k) for k in want} == want,
            timeout_s=60,
            what="exporter shows 3 held and an empty outbox",
        )
        assert len(a.client.poll("main-a")) == 3
        wait_until(lambda: _held_gauge(port) == 0.0, timeout_s=30, what="exporter shows 0 held")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
