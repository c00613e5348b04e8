"""``--log-format json|text`` and ``--log-level`` on every long-running command: one JSON object
per line for a log shipper, the level honoured (docs/cli.md "Long-running commands: logs")."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from pipeline.cli.logs import LogFormat, LogLevel, configure_logging
from tests.unit.test_cli_connect import ALL

LONG_RUNNING = ("gateway run", "relay run", "pool run", "exporter", "dlq report")


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_json_logs_are_one_object_per_line(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(LogFormat.JSON, LogLevel.WARNING)
    log = logging.getLogger("pipeline.test")
    log.info("not at this level")
    log.warning("relay %s behind", "a")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert (first["level"], first["logger"], first["message"]) == (
        "WARNING", "pipeline.test", "relay a behind")  # fmt: skip
    assert first["ts"].endswith("+00:00") and "exc" not in first
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc"]


def test_text_logs_are_lines(root_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LogFormat.TEXT, LogLevel.DEBUG)
    logging.getLogger("pipeline.test").debug("hello")
    err = capsys.readouterr().err
    assert err.endswith("DEBUG pipeline.test hello\n")


@pytest.mark.parametrize("path", LONG_RUNNING)
def test_every_long_running_command_takes_both_options(path: str) -> None:
    names = {n for p in ALL[path].params for n in getattr(p, "opts", ())}
    assert {"--log-format", "--log-level"} <= names
