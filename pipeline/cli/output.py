"""Shared CLI plumbing: one console, and one mapping from FleetError to a clean exit.

Every command prints through :data:`console` / :data:`err_console`, so how output fits its
destination is decided here once: a terminal gets its own width; anything else (``| cat``,
``> file``, a CI log) gets room enough that Rich never squeezes a table until its headers read
``sc…``, nor wraps a line at an assumed 80 columns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from pipeline.errors import FleetError

from .exits import exit_code
from .hot import emit_json

__all__ = [
    "FittingConsole",
    "console",
    "emit_json",
    "err_console",
    "fail_on_fleet_error",
]

# wider than any table a command prints: a destination that is no terminal has no width to fit
UNBOUNDED_WIDTH = 10_000


class FittingConsole(Console):
    """A Rich console that fits a terminal and never squeezes output that goes elsewhere.

    Rich sizes output that is not a terminal from ``COLUMNS`` or the controlling terminal, else
    80 columns, and shrinks a wide table to that: columns collapse and headers are cut to
    ``sc…``. Here such output is as wide as it needs to be (``COLUMNS`` included: it describes a
    terminal, and this output goes to none); an explicit ``width=`` still wins."""

    def __init__(self, *args: Any, width: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, width=width, **kwargs)
        self._explicit_width = width

    @property
    def size(self) -> ConsoleDimensions:
        fitted = super().size
        if self.is_terminal or self._explicit_width is not None:
            return fitted
        return ConsoleDimensions(UNBOUNDED_WIDTH, fitted.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = FittingConsole(stderr=False)
err_console = FittingConsole(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")


def fail_on_fleet_error(fn: Callable[P, R]) -> Callable[P, R]:
    """Print ``error [REASON] message`` on stderr and exit with the error's code
    (:func:`.exits.exit_code`: 1 refused, 75 retriable, 3 fenced) instead of a traceback.

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
            raise typer.Exit(exit_code(exc)) from exc

    return wrapper
