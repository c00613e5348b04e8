"""Shared CLI plumbing: one console, and one mapping from FleetError to a clean exit."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.errors import FleetError

from .hot import EXIT_FLEET_ERROR, emit_json

__all__ = ["EXIT_FLEET_ERROR", "console", "emit_json", "err_console", "fail_on_fleet_error"]

console = Console(stderr=False)
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")


def fail_on_fleet_error(fn: Callable[P, R]) -> Callable[P, R]:
    """Print ``error [REASON] message`` on stderr and exit 2 instead of a traceback.

    The message is printed as it is (escaped: a ``[...]`` in it is not Rich markup) and on one
    line (not wrapped at the console's width): the same text the lean entry prints."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except FleetError as exc:
            err_console.print(
                f"[bold red]error[/] {escape(str(exc))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(EXIT_FLEET_ERROR) from exc

    return wrapper
