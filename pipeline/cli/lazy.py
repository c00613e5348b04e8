"""Subcommands that load on use: ``fleet --help`` reads a table, ``fleet X`` imports only X.

Invariant (docs/cli.md): the CLI entry imports no heavy dependency; each subcommand loads its own.
Agents call ``fleet send`` from their shells, so every process pays for what the entry imports:
importing every subcommand module eagerly (SQLAlchemy, Kafka, Alembic, MCP, matplotlib) cost
0.5 s per call before anything ran.

The root group lists each command from a :class:`Lazy` entry (its name, module and the one-line
help the listing shows) and swaps in the real command only when a name is resolved to run it
(invocation, its ``--help``, completion of its options). ``tests/unit/test_cli_lazy.py`` holds
every entry's help to its command's own, so the table cannot drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from typer.core import TyperCommand, TyperGroup

from .commands import Lazy, command, group, listing_help

if TYPE_CHECKING:
    # typer (>= 0.26) vendors click; TyperGroup's method signatures are written against it
    from typer import _click

__all__ = ["Lazy", "LazyGroup", "command", "group", "listing_help"]


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from :attr:`table`, each imported on first use.

    Until then a command is a placeholder carrying its name and listing help, which is all that
    ``fleet --help``, the "did you mean" hint and name completion read.
    """

    table: ClassVar[Sequence[Lazy]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # a command the app registered itself (eagerly) wins over a table entry of that name
        self._entries = {e.name: e for e in self.table if e.name not in self.commands}
        for entry in self._entries.values():
            self.commands[entry.name] = TyperCommand(entry.name, help=entry.help)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        entry = self._entries.pop(name, None) if name is not None else None
        if entry is not None:
            cmd = self.commands[entry.name] = entry.load(self.rich_markup_mode)
        return name, cmd, rest
