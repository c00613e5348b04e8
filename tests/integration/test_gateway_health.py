"""A gateway's ``/healthz`` and ``/readyz`` on its metrics port, each state on the real broker,
and ``READY=1`` / ``STOPPING=1`` to a service manager's notify socket (deploy/systemd/).

* ready: ``fleet gateway run --metrics-port`` under a ``$NOTIFY_SOCKET`` answers 200 on both, and
  tells the socket ``READY=1`` -- after ``/readyz`` passes, never before -- then ``STOPPING=1`` on
  SIGTERM;
* not ready while the roster catches up (its reader held back: the inbox waits for the roster,
  R-PRES-1's bindings, so the group is not joined either), ready once it has;
* not ready while the store is unwritable (its PostgreSQL stopped: connections refused), ready
  again once it is back -- alive throughout: a store outage is waited out, not a restart.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.client import Factories
from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.clients import new_consumer
from pipeline.observability.health import gateway_health, serve
from pipeline.presence.roles import Delivery, Role
from pipeline.support.processes import FleetProcess
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, _pg, start_test_postgres
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka

MAIN = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """``(status, body)`` of one GET, None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except OSError:
        return None


def _status(port: int, path: str) -> int | None:
    got = probe(port, path)
    return None if got is None else got[0]


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    folder = tempfile.mkdtemp(prefix="sdn-")  # short: AF_UNIX paths end at 107 bytes
    path = str(Path(folder) / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    yield sock, path
    sock.close()
    shutil.rmtree(folder, ignore_errors=True)


def test_a_gateway_process_reports_ready_and_tells_systemd(
    kafka: BrokerHandle, tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    port = _free_port()
    config = fleet.config_file("A", MAIN)
    args = ["gateway", "run", "--config", str(config), "--metrics-port", str(port)]
    proc = FleetProcess(tmp_path / "A.log", args, env={"NOTIFY_SOCKET": path}).start()
    try:
        sock.settimeout(120)
        message = sock.recv(4096)
        ready_then = probe(port, "/readyz")  # READY=1 came after readiness passed
        assert message.split(b"\n")[0] == b"READY=1", message
        assert b"STATUS=gateway A" in message
        assert ready_then is not None and ready_then[0] == 200, ready_then
        assert ready_then[1] == {
            "ready": True,
            "checks": {
                "alive": "ok",
                "group": "ok",
                "roster": "ok",
                "running": "ok",
                "store": "ok",
            },
        }
        assert probe(port, "/healthz") == (200, {"alive": True, "checks": {"alive": "ok"}})
        proc.terminate()
        sock.settimeout(60)
        assert sock.recv(4096) == b"STOPPING=1"
        assert proc.wait_exit(60) == 0, proc.output()[-3000:]
    finally:
        proc.stop()


class HeldRosterReader:
    """The roster reader's consumer, held back until ``gate`` opens: a roster still catching up
    (a long roster, a slow broker) made to last as long as the test needs."""

    def __init__(self, inner: Any, gate: threading.Event) -> None:
        self._inner, self._gate = inner, gate

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        self._gate.wait(120)
        return self._inner.list_topics(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _served(parts: GatewayParts) -> tuple[int, Any]:
    port = _free_port()
    health = gateway_health(
        stop=parts.gateway.stop_event,
        fatal=lambda: parts.gateway.fatal,
        runtime=parts.runtime,
        roster=parts.roster,
        engine=parts.engine,
    )
    return port, serve(parts.registry, port=port, address="127.0.0.1", health=health)


def _config(fleet: Fleet, store: str) -> GatewayConfig:
    return GatewayConfig(
        host="A",
        bootstrap=fleet.bootstrap,
        store_url=store,
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
    )


def test_not_ready_while_the_roster_catches_up(kafka: BrokerHandle, tmp_path: Path) -> None:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    gate = threading.Event()

    def consumer(conf: dict[str, Any]) -> Any:
        made = new_consumer(conf)
        return HeldRosterReader(made, gate) if "roster-reader" in conf["group.id"] else made

    parts = build_gateway(
        _config(fleet, f"sqlite:///{tmp_path / 'A.sqlite'}"),
        signer=fleet.signers["A"],
        trust=fleet.trust,
        factories=Factories(consumer=consumer),
    )
    port, server = _served(parts)
    parts.gateway.start()
    try:
        status, body = probe(port, "/readyz") or (None, {})
        assert status == 503, body
        assert body["checks"]["roster"] == "roster catching up (not read to its end yet)"
        assert body["checks"]["group"].endswith("not joined yet (no partition assigned)")
        assert body["checks"]["store"] == "ok" and body["checks"]["alive"] == "ok"
        assert _status(port, "/healthz") == 200, "catching up is alive"
        gate.set()
        wait_until(lambda: _status(port, "/readyz") == 200, timeout_s=120, what="ready")
        assert parts.roster.freshness().horizon_ms is not None
        assert parts.runtime.rebalance.assigned
    finally:
        gate.set()
        parts.gateway.stop()
        server.shutdown()
        server.server_close()
    assert parts.gateway.fatal is None


@pytest.mark.postgres
def test_not_ready_while_the_store_is_unwritable(kafka: BrokerHandle, tmp_path: Path) -> None:
    pg = start_test_postgres()
    if pg.directory is None:
        pytest.skip("FLEET_TEST_PG_URL is a server this test must not stop")
    data = pg.directory
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    parts = build_gateway(_config(fleet, pg.url), signer=fleet.signers["A"], trust=fleet.trust)
    port, server = _served(parts)
    parts.gateway.start()
    try:
        wait_until(lambda: _status(port, "/readyz") == 200, timeout_s=120, what="ready")
        _pg(["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])
        wait_until(lambda: _status(port, "/readyz") == 503, timeout_s=60, what="not ready")
        _status_code, body = probe(port, "/readyz") or (None, {})
        checks = body["checks"]
        assert checks["store"] != "ok" and "OperationalError" in checks["store"], checks
        assert checks["group"] == checks["roster"] == checks["alive"] == "ok", checks
        assert _status(port, "/healthz") == 200, "a store outage is waited out, not a restart"
        port_pg = pg.url.rsplit(":", 1)[1].split("/", 1)[0]
        opts = f"-p {port_pg} -k {data.parent} -c listen_addresses=127.0.0.1"
        _pg(["pg_ctl", "-D", str(data), "-w", "-l", str(data.parent / "server.log"),
             "-o", opts, "start"])  # fmt: skip
        wait_until(lambda: _status(port, "/readyz") == 200, timeout_s=120, what="ready again")
    finally:
        parts.gateway.stop()
        server.shutdown()
        server.server_close()
        pg.close()
