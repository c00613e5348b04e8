"""``fleet gateway run --metrics-address``: gateway metrics can listen beyond loopback."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.cli.serving import serve_metrics
from pipeline.errors import ConfigError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_served_on_the_given_address() -> None:
    registry = CollectorRegistry()
    Counter("fleet_probe", "a probe", registry=registry).inc(3)
    port = _free_port()
    server = serve_metrics(registry, port=port, address="0.0.0.0")
    try:
        assert server.server_address[0] == "0.0.0.0"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"fleet_probe_total 3.0" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_taken_port_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(ConfigError) as err:
            serve_metrics(CollectorRegistry(), port=port, address="127.0.0.1")
    assert "--metrics-port" in str(err.value)


def test_the_option_is_on_gateway_run() -> None:
    result = CliRunner().invoke(
        app, ["gateway", "run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0 and "--metrics-address" in result.output
