"""A minimal parser for the hot commands' options: the lean half of ``fleet send``.

Agents call ``fleet send`` from their shells, one process per message; Typer and Rich alone cost
about 0.3 s of each. :mod:`.entry` parses the hot commands with this module instead, and hands
every argv it does not take whole to the Typer app, which then answers exactly as it always did.

The parser accepts a strict subset of what click accepts for the same command -- long options
(``--to X``, ``--to=X``), the command's short options (``-c X``, ``-cX``), flags, ``--`` and
positional arguments in any order -- and declines (``None``) everything else: an unknown or
repeated option, a missing required one, a value that does not convert, a value that looks
like an option, ``--help``, an extra argument. A declined argv is never an error here: Typer
parses it again and gives the usage error, help or result it always gave.

Invariant: a :class:`Spec` is the Typer command's parameters, name for name.
``tests/unit/test_cli_lean.py`` holds every spec to its command (option names, required, value
types, defaults) and checks that whatever the lean parser accepts, click parses to the same
values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The value types the lean parser converts. Typer converts with pydantic, whose number syntax is
# not Python's (underscores, whitespace, "inf"): the lean parser takes plain decimals only.
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")
CONVERTERS: tuple[Callable[[str], Any], ...] = (str, float, int, Path)


# Plain classes with slots, not frozen dataclasses: a lean ``fleet send`` makes them at import,
# once per message, and a dataclass's generated methods cost 1-2 ms each class. The
# specs below are module constants that nothing assigns to.
class Opt:
    """One option: ``dest`` is the command function's parameter name; ``type`` is one of
    :data:`CONVERTERS`, or ``bool`` for a flag; ``envvar``: the variable whose non-empty value
    stands in for a missing option (as click reads it)."""

    __slots__ = ("default", "dest", "envvar", "names", "required", "type")

    def __init__(
        self,
        dest: str,
        names: tuple[str, ...],
        type: Callable[[str], Any] = str,
        required: bool = False,
        default: Any = None,
        envvar: str | None = None,
    ) -> None:
        self.dest, self.names, self.type = dest, names, type
        self.required, self.default, self.envvar = required, default, envvar

    @property
    def flag(self) -> bool:
        return self.type is bool


class Arg:
    """One positional argument (optional, one value)."""

    __slots__ = ("default", "dest", "type")

    def __init__(self, dest: str, type: Callable[[str], Any] = str, default: Any = None) -> None:
        self.dest, self.type, self.default = dest, type, default


class Spec:
    """One command's options and positional arguments."""

    __slots__ = ("arguments", "options")

    def __init__(self, options: tuple[Opt, ...], arguments: tuple[Arg, ...] = ()) -> None:
        self.options, self.arguments = options, arguments

    def parse(self, args: Sequence[str]) -> dict[str, Any] | None:
        """The command's parameters from ``args`` (after the command name), or ``None`` when
        this argv is not for the lean path (Typer will parse it)."""
        by_name = {name: opt for opt in self.options for name in opt.names}
        values: dict[str, Any] = {}
        positional: list[str] = []
        i = 0
        while i < len(args):
            token = args[i]
            i += 1
            if token == "--":
                positional.extend(args[i:])
                break
            if not token.startswith("-") or token == "-":
                positional.append(token)
                continue
            name, value = _split(token)
            opt = by_name.get(name)
            if opt is None or opt.dest in values:
                return None  # unknown (or --help), or repeated: Typer decides
            if opt.flag:
                if value is not None:
                    return None
                values[opt.dest] = True
                continue
            if value is None:
                if i >= len(args):
                    return None
                value, i = args[i], i + 1
            if value.startswith("-") and value != "-":
                return None  # click would take it as the value; an agent rarely means that
            converted = _convert(opt.type, value)
            if converted is None:
                return None
            values[opt.dest] = converted
        if len(positional) > len(self.arguments):
            return None
        for opt in self.options:
            if opt.dest not in values and opt.envvar and os.environ.get(opt.envvar):
                values[opt.dest] = _convert(opt.type, os.environ[opt.envvar])
                if values[opt.dest] is None:
                    return None
            if opt.dest not in values:
                if opt.required:
                    return None
                values[opt.dest] = False if opt.flag else opt.default
        for n, arg in enumerate(self.arguments):
            if n < len(positional):
                values[arg.dest] = _convert(arg.type, positional[n])
                if values[arg.dest] is None:
                    return None
            else:
                values[arg.dest] = arg.default
        return values


def _split(token: str) -> tuple[str, str | None]:
    """``--name=value`` / ``--name`` / ``-cVALUE`` / ``-c`` as (option name, attached value)."""
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        return name, value if eq else None
    return token[:2], token[2:] or None


def _convert(convert: Callable[[str], Any], value: str) -> Any:
    if convert not in CONVERTERS or (convert is float and not _DECIMAL.fullmatch(value)):
        return None
    if convert is int and not _DIGITS.fullmatch(value):
        return None
    try:
        return convert(value)
    except ValueError:
        return None


CONFIG_ENV = "FLEET_CONFIG"  # the default --config, for a service or a container
CONFIG = Opt("config", ("--config", "-c"), type=Path, required=True, envvar=CONFIG_ENV)
JSON = Opt("as_json", ("--json",), type=bool, default=False)
SENDER = Opt("sender", ("--from",), required=True)
TO = Opt("to", ("--to",), required=True)
TURN = Opt("turn", ("--turn",), required=True)
TRACE_ENV = "FLEET_TRACE_ID"  # set by the injectors in a worker's environment: its brief's trace
TRACE = Opt("trace", ("--trace",), envvar=TRACE_ENV)

# What :mod:`.entry` runs without Typer; each spec mirrors the command in gateway_cmd.py.
SPECS: dict[str, Spec] = {
    "send": Spec(
        options=(
            CONFIG,
            SENDER,
            TO,
            Opt("kind", ("--kind",), default="SEND"),
            Opt("ttl", ("--ttl",), type=float),
            TRACE,
            JSON,
        ),
        arguments=(Arg("body"),),
    ),
    "ask": Spec(
        options=(
            CONFIG,
            SENDER,
            TO,
            Opt("ttl", ("--ttl",), type=float, default=120.0),
            TRACE,
            JSON,
        ),
        arguments=(Arg("body"),),
    ),
    "answer": Spec(options=(CONFIG, SENDER, TO, TURN, TRACE, JSON), arguments=(Arg("body"),)),
    "abandon": Spec(options=(CONFIG, SENDER, TO, TURN, JSON)),
    "poll": Spec(
        options=(
            CONFIG,
            Opt("recipient", ("--as",), required=True),
            Opt("sender", ("--from",)),
            Opt("limit", ("--limit",), type=int, default=100),
            Opt("wait", ("--wait",), type=float, default=0.0),
            JSON,
        )
    ),
}
