"""The ``fleet`` command: one Typer app whose subcommands load on use (see :mod:`.lazy`).

Add a command with one line in :data:`COMMANDS` (:mod:`.commands`): its name, the
``pipeline.cli`` module that defines it, and its help's first paragraph
(``tests/unit/test_cli_lazy.py`` checks that text against the command's own help and that every
command a module defines has its line). The ``fleet`` console script is :func:`.entry.main`: it
runs the hot commands without this module when it can, and this app for everything else.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .commands import COMMANDS, ROOT_HELP, version_line
from .lazy import LazyGroup

__all__ = ["COMMANDS", "FleetGroup", "app", "main"]


class FleetGroup(LazyGroup):
    table = COMMANDS


app = typer.Typer(
    name="fleet",
    cls=FleetGroup,
    help=ROOT_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(version_line(), nl=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    # Typer builds a group only for an app with a callback or registered commands; ours come
    # from the table, so this callback is what makes `fleet` a group (and holds --version).
    pass


def main() -> None:  # pragma: no cover
    app()
