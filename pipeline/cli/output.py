"""Shared CLI plumbing: one console, and one mapping from FleetError to a clean exit."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from pipeline.errors import FleetError

console = Console(stderr=False)
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")

EXIT_FLEET_ERROR = 2


def fail_on_fleet_error(fn: Callable[P, R]) -> Callable[P, R]:
    """Print ``[REASON] message`` on stderr and exit 2 instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except FleetError as exc:
            err_console.print(f"[bold red]error[/] {exc}", markup=True, highlight=False)
            raise typer.Exit(EXIT_FLEET_ERROR) from exc

    return wrapper


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
