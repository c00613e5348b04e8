"""A small TOML writer: the inverse of :mod:`tomllib` for the values a fleet.toml holds.

Strings, integers, floats, booleans, arrays of those, nested tables and arrays of tables; any
other value is a ``TypeError`` rather than a guess. The standard library reads TOML but does not
write it, and the package takes no dependency for the rig's one use (:mod:`.fleet_toml`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def dumps(table: Mapping[str, Any]) -> str:
    """``table`` as a TOML document: ``tomllib.loads(dumps(t)) == t`` for the supported values."""
    lines: list[str] = []
    _table(table, (), lines)
    return "\n".join(lines) + "\n"


def _table(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    """Plain keys first, then sub-tables, then arrays of tables: a header ends the keys above."""
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    arrays = {k: v for k, v in table.items() if _is_array_of_tables(v)}
    for key, value in table.items():
        if key not in nested and key not in arrays:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested.items():
        lines.append(f"[{_dotted((*path, key))}]")
        _table(value, (*path, key), lines)
    for key, value in arrays.items():
        for item in value:
            lines.append(f"[[{_dotted((*path, key))}]]")
            _table(item, (*path, key), lines)


def _is_array_of_tables(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(_key(k) for k in path)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")


def _string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
