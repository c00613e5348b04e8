"""Tables stay readable when stdout is no terminal (``fleet chaos run | cat``, ``> file``).

Rich sizes output that is not a terminal at the controlling terminal's width or 80 columns and
squeezes a wide table to it, cutting headers to ``sc…``. ``pipeline.cli.output``'s consoles,
the ones every command prints through, give such output the width it needs."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from pipeline.cli import output
from pipeline.cli.output import UNBOUNDED_WIDTH, FittingConsole

# the header of `fleet chaos run`'s table: wider than 80 columns once the values are in
HEADERS = (
    "scenario", "reps", "ops", "faults", "lost", "dup", "order", "unseen", "refused", "late",
    "uncertain", "bad", "slowest recovery", "verdict",
)  # fmt: skip


def _render(console: Console) -> str:
    table = Table(title="fleet chaos run --seed 0 --repeat 20")
    for name in HEADERS:
        table.add_column(name)
    table.add_row("#12 broker-leader-kill-during-rebalance", *["123456"] * (len(HEADERS) - 1))
    console.print(table)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_a_wide_table_to_a_non_terminal_keeps_every_header_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # COLUMNS describes a terminal (pytest-xdist workers and some shells export it): not this one
    monkeypatch.setenv("COLUMNS", "80")
    text = _render(FittingConsole(file=io.StringIO()))
    for name in HEADERS:
        assert name in text, text
    assert "…" not in text
    assert "#12 broker-leader-kill-during-rebalance" in text


def test_the_same_table_at_rich_default_width_is_squeezed() -> None:
    """The table above does not fit 80 columns: the test above could fail."""
    text = _render(Console(file=io.StringIO(), width=80))
    assert "…" in text or not all(name in text for name in HEADERS)


def test_a_terminal_keeps_its_own_width_and_an_explicit_width_wins() -> None:
    assert FittingConsole(file=io.StringIO(), force_terminal=True).width < UNBOUNDED_WIDTH
    assert FittingConsole(file=io.StringIO(), width=90).width == 90
    assert FittingConsole(file=io.StringIO()).width == UNBOUNDED_WIDTH


def test_every_command_prints_through_the_shared_consoles() -> None:
    assert isinstance(output.console, FittingConsole)
    assert isinstance(output.err_console, FittingConsole)
    cli = Path(output.__file__).parent
    own: list[str] = []
    for path in sorted(cli.glob("*.py")):
        if path.name == "output.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Console":
                own.append(f"{path.name}:{node.lineno}")
    assert not own, f"a console of its own squeezes piped output: {own}"
