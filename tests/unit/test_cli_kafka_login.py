"""Every ``fleet`` command that talks to Kafka takes the one ``--kafka-config`` login.

The client constructors under :mod:`pipeline.kafka.clients` (confluent_kafka's Producer, Consumer
and AdminClient) are replaced by a recorder: the login's access check gets an admin that answers
like a reachable cluster; every other client records its settings and stops the command there.
So each test runs the command's own code up to its first real client and checks that every
client it built carries the login (and that the password shows nowhere in the output).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.kafka.refusals import RefusalWatch

PASSWORD = "unit-pw-7f3a9c"  # a test secret that must never be printed


class Built(Exception):
    """A command built a real client: the recorder stops it here."""


class Reachable:
    """The access check's admin: the cluster accepts the login."""

    def poll(self, _timeout: float) -> int:
        return 0

    def list_topics(self, **_kw: Any) -> None:
        return None


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []

    def recorder(kind: str) -> Any:
        def make(conf: dict[str, Any]) -> Any:
            seen.append((kind, dict(conf)))
            if kind == "admin" and isinstance(conf.get("logger"), RefusalWatch):
                return Reachable()
            raise Built(kind)

        return make

    monkeypatch.setattr(confluent_kafka, "Producer", recorder("producer"))
    monkeypatch.setattr(confluent_kafka, "Consumer", recorder("consumer"))
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", recorder("admin"))
    monkeypatch.setenv("FLEET_TEST_KAFKA_PW", PASSWORD)
    monkeypatch.delenv("FLEET_KAFKA_CONFIG", raising=False)
    return seen


@pytest.fixture
def login(tmp_path: Path) -> Path:
    path = tmp_path / "ops.kafka.toml"
    path.write_text(
        "[kafka]\n"
        'security_protocol = "SASL_SSL"\n'
        'sasl_mechanism = "SCRAM-SHA-512"\n'
        'sasl_username = "ops"\n'
        'sasl_password_env = "FLEET_TEST_KAFKA_PW"\n'
        f'ssl_ca_location = "{tmp_path / "ca.pem"}"\n',
        encoding="utf-8",
    )
    return path


SCENARIO = str(Path(__file__).resolve().parents[2] / "examples" / "lab" / "worked_example.toml")


def commands(tmp: Path) -> dict[str, list[str]]:
    db = f"sqlite:///{tmp / 'store.sqlite'}"
    lines = tmp / "lines.txt"
    if tmp.is_dir():
        lines.write_text("k\tv\n", encoding="utf-8")
    b = ["--bootstrap", "b:1"]
    stats = ["--stats", str(tmp / "stats.json")]
    return {
        "topics apply": ["topics", "apply", "--host", "a", *b],
        "acls apply": ["acls", "apply", "--host", "a", *b],
        "dlq ls": ["dlq", "ls", *b],
        "dlq show": ["dlq", "show", "0:0", *b],
        "dlq replay": ["dlq", "replay", *b],
        "dlq report": ["dlq", "report", *b, "--store-url", db, "--sink-topic", "t.failed"],
        "lag": ["lag", *b],
        "exporter": ["exporter", *b, "--metrics-port", "0"],
        "pool run": ["pool", "run", "--pool", "p", *b, "--store-url", db, "--sleep", "0"],
        "pool submit": ["pool", "submit", "--pool", "p", *b, str(lines)],
        "pool status": ["pool", "status", "--pool", "p", *b],
        "relay run": ["relay", "run", "--store-url", db, *b],
        "roster": ["roster", *b, "--trust-dir", str(tmp)],
        "lab run": ["lab", "run", SCENARIO, *b, "--out", str(tmp / "lab")],
        "lab produce": ["lab", "produce", SCENARIO, *b, "--topic", "t", "--start-at", "0", *stats],
    }


NAMES = list(commands(Path("/nonexistent")))


@pytest.mark.parametrize("name", NAMES)
def test_every_client_of_the_command_carries_the_login(
    name: str, built: list[tuple[str, dict[str, Any]]], login: Path, tmp_path: Path
) -> None:
    args = [*commands(tmp_path)[name], "--kafka-config", str(login)]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, Built), (result.exception, result.output)
    # the access check's admin, then the command's first client (report and the lab's
    # producer process check nothing first: their parents did)
    assert len(built) >= (1 if name in ("dlq report", "lab produce") else 2), built
    for kind, conf in built:
        assert conf["security.protocol"] == "SASL_SSL", kind
        assert conf["sasl.mechanism"] == "SCRAM-SHA-512", kind
        assert conf["sasl.username"] == "ops", kind
        assert conf["sasl.password"] == PASSWORD, kind
        assert conf["bootstrap.servers"] == "b:1", kind
    assert PASSWORD not in result.output


@pytest.mark.parametrize("name", ["dlq ls", "lag", "pool submit"])
def test_the_login_also_comes_from_fleet_kafka_config(
    name: str, built: list[tuple[str, dict[str, Any]]], login: Path, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        app, commands(tmp_path)[name], env={"FLEET_KAFKA_CONFIG": str(login)}
    )
    assert isinstance(result.exception, Built), result.output
    assert built and all(conf["sasl.username"] == "ops" for _kind, conf in built)


def test_without_a_login_the_clients_are_plaintext(
    built: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, commands(tmp_path)["dlq ls"])
    assert isinstance(result.exception, Built), result.output
    assert [kind for kind, _ in built] == ["consumer"]  # no access check without a login
    assert "security.protocol" not in built[0][1] and "sasl.username" not in built[0][1]


def test_a_missing_password_is_a_config_error_not_a_connection(
    built: list[tuple[str, dict[str, Any]]],
    login: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLEET_TEST_KAFKA_PW")
    result = CliRunner().invoke(app, [*commands(tmp_path)["lag"], "--kafka-config", str(login)])
    assert result.exit_code != 0 and not isinstance(result.exception, Built)
    assert "SECRET_UNREADABLE" in result.output or "is not set" in result.output
    assert built == []
