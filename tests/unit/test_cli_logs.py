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


def test_a_record_goes_to_stderr_as_it_is_now_not_to_a_stream_closed_since(
    root_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command run in-process (``CliRunner``) set logging up while stderr was a stream that
    closed when it returned; a gateway thread still running then logged into the closed stream
    ("--- Logging error ---" in the suite's output)."""
    import io
    import sys

    errors: list[BaseException | None] = []
    monkeypatch.setattr(logging, "raiseExceptions", True)
    monkeypatch.setattr(
        logging.Handler, "handleError", lambda self, record: errors.append(sys.exc_info()[1])
    )
    during = io.StringIO()
    monkeypatch.setattr(sys, "stderr", during)
    configure_logging(LogFormat.TEXT, LogLevel.INFO)
    logging.getLogger("pipeline.test").info("while the command runs")
    after = io.StringIO()
    monkeypatch.setattr(sys, "stderr", after)
    during.close()
    logging.getLogger("pipeline.test").info("from a thread, later")
    assert errors == []
    assert after.getvalue().endswith("INFO pipeline.test from a thread, later\n")
