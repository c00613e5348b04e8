"""``/healthz``, ``/readyz`` and ``/metrics`` on one server (``pipeline.observability.health``),
and the store probe on a real SQLite file: writable, and opened read-only."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import create_engine, text

from pipeline.observability.health import Health, serve, store_writable
from pipeline.store import make_engine, serialize_writes
from pipeline.store.version import VERSION_TABLE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture
def served() -> Iterator[tuple[int, dict[str, Any]]]:
    state: dict[str, Any] = {"fatal": None, "store": None}
    registry = CollectorRegistry()
    Counter("fleet_probe_things", "things", registry=registry).inc()

    def boom() -> str | None:
        if state["store"] == "raise":
            raise RuntimeError("database is locked\nsecond line")
        return state["store"]

    health = Health(
        alive={"alive": lambda: state["fatal"]},
        ready={"store": boom, "group": lambda: None},
    )
    port = _free_port()
    server = serve(registry, port=port, address="127.0.0.1", health=health)
    yield port, state
    server.shutdown()
    server.server_close()


def test_ready_alive_and_metrics_on_one_port(served: tuple[int, dict[str, Any]]) -> None:
    port, _state = served
    status, body = get(port, "/readyz")
    assert status == 200
    assert json.loads(body) == {
        "ready": True,
        "checks": {"alive": "ok", "group": "ok", "store": "ok"},
    }
    status, body = get(port, "/healthz")
    assert (status, json.loads(body)) == (200, {"alive": True, "checks": {"alive": "ok"}})
    status, body = get(port, "/metrics")
    assert status == 200 and b"fleet_probe_things_total 1.0" in body


def test_a_failing_check_is_named_with_its_reason(served: tuple[int, dict[str, Any]]) -> None:
    port, state = served
    state["store"] = "raise"
    status, body = get(port, "/readyz?verbose")
    assert status == 503
    checks = json.loads(body)["checks"]
    assert checks["store"] == "RuntimeError: database is locked"
    assert checks["group"] == "ok"
    assert get(port, "/healthz")[0] == 200, "not ready is not dead"
    state["fatal"] = "fatal: fenced"
    assert get(port, "/healthz")[0] == 503
    assert json.loads(get(port, "/readyz")[1])["checks"]["alive"] == "fatal: fenced"


def test_no_checks_reads_alive_and_ready() -> None:
    port = _free_port()
    server = serve(CollectorRegistry(), port=port, address="127.0.0.1")
    try:
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_the_store_probe_passes_on_a_writable_file_and_changes_nothing(tmp_path: Path) -> None:
    engine = serialize_writes(make_engine(f"sqlite:///{tmp_path / 's.sqlite'}"))
    version = text(f"SELECT version_num FROM {VERSION_TABLE}")
    with engine.connect() as conn:
        before = conn.execute(version).all()
    assert store_writable(engine)() is None
    assert store_writable(engine)() is None
    with engine.connect() as conn:
        assert conn.execute(version).all() == before
    engine.dispose()


def test_the_store_probe_fails_on_a_store_opened_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    make_engine(f"sqlite:///{path}").dispose()  # the schema, at head
    readonly = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    with pytest.raises(Exception, match="readonly database"):
        store_writable(readonly)()
    readonly.dispose()
