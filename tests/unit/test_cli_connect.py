"""Every ``fleet`` command that talks to Kafka takes the same connection options (docs/cli.md
"Connecting"): ``--bootstrap-server``/``-b`` (``--bootstrap`` kept) defaulting to
``$KAFKA_BOOTSTRAP``, ``--command-config`` and ``-X``, defined once in ``pipeline/cli/login.py``;
and every command ends with the documented exit code for what stopped it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pipeline.cli.commands import COMMANDS
from pipeline.cli.exits import EXIT_CODES, exit_code
from pipeline.cli.login import BOOTSTRAP_NAMES, COMMAND_CONFIG_NAMES
from pipeline.cli.main import app
from pipeline.cli.output import fail_on_fleet_error
from pipeline.errors import (
    BrokerError,
    ConfigError,
    DeliveryError,
    FencedError,
    FleetError,
    OffsetsLostError,
    StoreError,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
# reads a host's fleet.toml: -b/--command-config replace the file's, not the environment
CONFIG_FILE_COMMANDS = {"gateway run", "gateway leave"}
NO_DASH_X = {"lab run"}  # its producer and members are processes that would not see it


def _commands() -> Iterator[tuple[str, Any]]:
    seen: set[str] = set()
    for entry in COMMANDS:
        if entry.module in seen and not entry.group:
            continue
        for name, cmd in entry.module_commands().items():
            yield from _walk(name, cmd)
        seen.add(entry.module)


def _walk(path: str, cmd: Any) -> Iterator[tuple[str, Any]]:
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group (typer vendors click: no isinstance on click's types)
        for name, sub in cmd.commands.items():
            yield from _walk(f"{path} {name}", sub)


ALL = dict(_commands())


def _option(cmd: Any, name: str) -> Any:
    return next((p for p in cmd.params if p.param_type_name == "option" and name in p.opts), None)


def test_every_bootstrap_option_is_the_one_shared_definition() -> None:
    with_bootstrap = {p: c for p, c in ALL.items()
                      if _option(c, "--bootstrap") or _option(c, "-b")}  # fmt: skip
    assert {"relay run", "pool run", "exporter", "lag", "topics apply", "roster", "dlq ls",
            "gateway run", "acls apply", "chaos run", "demo"} <= set(with_bootstrap)  # fmt: skip
    for path, cmd in with_bootstrap.items():
        opt = _option(cmd, "--bootstrap-server")
        assert opt is not None and tuple(opt.opts) == BOOTSTRAP_NAMES, path
        want = None if path in CONFIG_FILE_COMMANDS else "KAFKA_BOOTSTRAP"
        assert opt.envvar == want, path


def test_every_command_with_a_login_has_the_bootstrap_and_dash_x() -> None:
    with_login = {p: c for p, c in ALL.items() if _option(c, "--command-config")}
    assert len(with_login) >= 12
    for path, cmd in with_login.items():
        opt = _option(cmd, "--command-config")
        assert opt is not None and tuple(opt.opts) == COMMAND_CONFIG_NAMES, path
        assert _option(cmd, "-b") is not None, path
        assert (_option(cmd, "-X") is None) == (path in NO_DASH_X), path


def test_relay_run_takes_its_bootstrap_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay = ALL["relay run"]
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")
    ctx = relay.make_context("run", ["--store-url", "sqlite://"])
    assert ctx.params["bootstrap"] == "127.0.0.1:1"
    short = relay.make_context("run", ["--store-url", "sqlite://", "-b", "h:2"])
    assert short.params["bootstrap"] == "h:2"


def test_no_broker_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    out = CliRunner().invoke(app, ["topics", "apply", "--host", "a", "--dry-run"])
    assert out.exit_code == 2, out.output
    assert "--bootstrap-server" in out.output and "KAFKA_BOOTSTRAP" in out.output


def test_a_secret_with_dash_x_is_refused_before_anything_connects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["topics", "apply", "--host", "a", "-b", "127.0.0.1:1", "-X", "sasl.password=hunter2"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1 and "[SECRET_INLINE]" in out.output
    assert "hunter2" not in out.output


# -- exit codes -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ConfigError("bad"), 1),
        (DeliveryError("no such recipient"), 1),
        (BrokerError("down"), 75),
        (StoreError("locked"), 75),
        (FleetError("later", retriable=True), 75),
        (FencedError("taken over"), 3),
        (OffsetsLostError("gone", lost=None, context={}), 3),
    ],
)
def test_a_fleet_error_exits_with_its_kinds_code(exc: FleetError, code: int) -> None:
    assert exit_code(exc) == code
    one = typer.Typer()

    @one.command()
    @fail_on_fleet_error
    def fail() -> None:
        raise exc

    out = CliRunner().invoke(one, [])
    assert out.exit_code == code and f"[{exc.reason}]" in out.output


def test_the_exit_code_table_in_the_docs_is_the_codes() -> None:
    text = (DOCS / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\d+)` \| `(\w+)` \|", section, re.M)
    assert [(int(c), n) for c, n in rows] == [(c, n) for c, n, _ in EXIT_CODES]


def test_a_usage_error_stays_two() -> None:
    out = CliRunner().invoke(app, ["topics", "apply", "--no-such-option"])
    assert out.exit_code == 2
