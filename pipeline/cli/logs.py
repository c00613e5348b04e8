"""How a long-running ``fleet`` process logs: ``--log-format json|text`` and ``--log-level``.

One definition of both options and one :func:`configure_logging`, used by every command that
runs until stopped (``fleet gateway run``, ``relay run``, ``pool run``, ``exporter``, ``dlq
report``). ``text`` is the line a person reads; ``json`` is one object per line for a log
shipper (journald, a container runtime): ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
``message``, ``thread``, and ``exc`` with the traceback when there is one. Both go to stderr.
Defaults come from ``FLEET_LOG_FORMAT`` / ``FLEET_LOG_LEVEL`` when set (docs/cli.md).
"""

from __future__ import annotations

import enum
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


class LogLevel(enum.StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


LogFormatOpt = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar="FLEET_LOG_FORMAT",
        case_sensitive=False,
        help="text (a line a person reads) or json (one object per line, for a log shipper).",
    ),
]
LogLevelOpt = Annotated[
    LogLevel,
    typer.Option(
        "--log-level",
        envvar="FLEET_LOG_LEVEL",
        case_sensitive=False,
        help="The lowest level logged.",
    ),
]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to ``sys.stderr`` as it is when the record is emitted, not as it was
    when the handler was made. A command run in-process (a test's ``CliRunner``) sets logging
    up while ``sys.stderr`` is a stream that is closed when the command returns; a handler
    holding that stream made every later record of a thread still running (a gateway's) a
    "Logging error" on a closed file."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass  # always sys.stderr (StreamHandler.__init__ sets it)


def configure_logging(fmt: LogFormat = LogFormat.TEXT, level: LogLevel = LogLevel.INFO) -> None:
    """Send the root logger's records to stderr in ``fmt`` from ``level`` up (replacing any
    handler already there: the process's one logging set-up)."""
    handler = StderrHandler()
    handler.setFormatter(
        JsonFormatter() if fmt is LogFormat.JSON else logging.Formatter(TEXT_FORMAT)
    )
    logging.basicConfig(level=level.value, handlers=[handler], force=True)
