"""The ``fleet`` console script: the hot commands without Typer, everything else with it.

Agents call ``fleet send`` from their shells, once per message (one such process
should take at most 0.15 s; Typer and Rich alone take 0.27-0.30 s to import). :func:`main`
looks at argv first:

* ``fleet --help`` prints the :data:`~.commands.COMMANDS` table as plain text, ``fleet
  --version`` the version;
* ``fleet send|ask|answer|abandon|poll ...`` is parsed by :mod:`.lean` and, when a gateway answers on
  the host's local socket, handed to it by :mod:`.hot` -- the same code the Typer command runs;
* anything else -- another command, an argv the lean parser declines, no gateway answering, a
  config that does not load -- runs the Typer app (:mod:`.main`) on the same argv, which answers
  as it always did (a send then writes the store directly).

Invariant: the lean path imports neither Typer, Rich, SQLAlchemy nor confluent-kafka
(``tests/unit/test_cli_lean.py`` checks it in a fresh interpreter, and that the options and the
output are the Typer command's).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

ROOT_OPTIONS = (
    ("--version", "Show the version and exit."),
    ("--install-completion", "Install completion for the current shell."),
    (
        "--show-completion",
        "Show completion for the current shell, to copy it or customize the installation.",
    ),
    ("--help", "Show this message and exit."),
)


def root_help(prog: str = "fleet") -> str:
    """``fleet --help`` as plain text: the root options and the COMMANDS table, in its order."""
    from .commands import COMMANDS, ROOT_HELP  # here: a lean send does not need the table

    lines = [f"Usage: {prog} [OPTIONS] COMMAND [ARGS]...", "", f"  {ROOT_HELP}", "", "Options:"]
    width = max(len(name) for name, _ in ROOT_OPTIONS) + 2
    lines += [f"  {name:<{width}}{text}" for name, text in ROOT_OPTIONS]
    lines += ["", "Commands:"]
    width = max(len(e.name) for e in COMMANDS) + 2
    lines += [f"  {e.name:<{width}}{' '.join(e.help.split())}" for e in COMMANDS]
    return "\n".join(lines) + "\n"


def _lean(name: str, args: Sequence[str]) -> int | None:
    from . import hot
    from .lean import SPECS

    params = SPECS[name].parse(args)
    run: Callable[[dict[str, Any]], int | None] = getattr(hot, name)
    return None if params is None else run(params)


LEAN = ("send", "ask", "answer", "abandon", "poll")  # each: a lean.SPECS entry and a hot.<name>


def lean(argv: Sequence[str]) -> int | None:
    """The exit code of ``argv`` run on the lean path, or ``None``: run it with Typer."""
    if list(argv) == ["--help"]:
        sys.stdout.write(root_help())
        return 0
    if list(argv) == ["--version"]:
        from .commands import version_line

        sys.stdout.write(version_line())
        return 0
    if argv and argv[0] in LEAN:
        return _lean(argv[0], argv[1:])
    return None


def main(argv: Sequence[str] | None = None) -> Any:
    """The ``fleet`` script (``argv``: the process's arguments when ``None``)."""
    code = lean(sys.argv[1:] if argv is None else argv)
    if code is not None:
        sys.stdout.flush()
        raise SystemExit(code)
    from .main import app

    return app() if argv is None else app(list(argv), prog_name="fleet")
