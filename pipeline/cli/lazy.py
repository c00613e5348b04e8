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

import importlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import DEFAULT_MARKUP_MODE, MarkupMode, TyperCommand, TyperGroup
from typer.main import get_group

if TYPE_CHECKING:
    # typer (>= 0.26) vendors click; TyperGroup's method signatures are written against it
    from typer import _click


@dataclass(frozen=True, kw_only=True)
class Lazy:
    """One top-level ``fleet`` command, loaded from ``pipeline.cli.<module>`` when used.

    ``group``: the module's ``app`` is ``fleet <name> ...``; otherwise ``<name>`` is one of the
    top-level commands the module adds (its ``register(root)``, or the commands of an unnamed
    ``app``). ``help`` is the first paragraph of the command's help, as ``fleet --help`` shows it.
    """

    name: str
    module: str
    help: str
    group: bool = False

    def load(self, rich_markup_mode: MarkupMode = DEFAULT_MARKUP_MODE) -> _click.Command:
        return self.module_commands(rich_markup_mode)[self.name]

    def module_commands(
        self, rich_markup_mode: MarkupMode = DEFAULT_MARKUP_MODE
    ) -> Mapping[str, _click.Command]:
        """Every top-level command the module adds in this entry's role, this one among them."""
        module = importlib.import_module(f"pipeline.cli.{self.module}")
        holder = typer.Typer(add_completion=False, rich_markup_mode=rich_markup_mode)
        if self.group:
            holder.add_typer(module.app, name=self.name)
        elif hasattr(module, "register"):
            module.register(holder)
        else:
            holder.add_typer(module.app)
        return get_group(holder).commands


def command(name: str, module: str, help: str) -> Lazy:
    return Lazy(name=name, module=module, help=help)


def group(name: str, module: str, help: str) -> Lazy:
    return Lazy(name=name, module=module, help=help, group=True)


def listing_help(text: str | None) -> str:
    """The part of a command's help that a group's listing shows: its first paragraph."""
    return inspect.cleandoc(text or "").split("\n\n")[0].strip()


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
