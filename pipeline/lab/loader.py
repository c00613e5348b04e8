"""Read a scenario TOML file into a :class:`~pipeline.lab.scenario.Scenario` (the edge).

Unknown keys are errors, never ignored: a typo in ``max_poll_records`` must not silently run
the default. Every message names the file, the key path (``outages[1].signal``) and the reason
code (the ``Lab`` family of :mod:`pipeline.reasons`). The layout::

    name, description, partitions, time_scale, duration_s, seed      (top level)
    [members]   count, max_poll_records, max_poll_interval_ms, session_timeout_ms,
                concurrency, max_in_flight, assignment, static_membership, dedupe
    [step]      kind, mean_s, min_s, max_s, sigma, worst_s
    [arrival]   kind, rate, burst_rate, burst_every_s, burst_length_s
    [keys]      count, skew
    [poison]    backoffs_s, count_attempts
    [lag]       initial, consume_rate
    [[outages]] at_s, duration_s, members ("all" or a list of indices), signal ("term"|"kill")
    [[restarts]] at_s, member, signal
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import ConfigError
from pipeline.pool.config import Assignment
from pipeline.reasons import Lab
from pipeline.runtime.lanes import Concurrency

from .scenario import (
    Arrival,
    ArrivalKind,
    Keys,
    LagSeed,
    Members,
    Outage,
    Poison,
    Restart,
    Scenario,
    StepKind,
    StepTime,
    StopSignal,
    bad,
)

T = TypeVar("T")
_TABLES: dict[str, type[Any]] = {
    "members": Members,
    "step": StepTime,
    "arrival": Arrival,
    "keys": Keys,
    "poison": Poison,
    "lag": LagSeed,
}
_ENUMS: dict[str, type[enum.StrEnum]] = {
    "kind@step": StepKind,
    "kind@arrival": ArrivalKind,
    "assignment@members": Assignment,
    "concurrency@members": Concurrency,
    "signal@outages": StopSignal,
    "signal@restarts": StopSignal,
}


def load_scenario(path: str | Path) -> Scenario:
    """Parse and validate one scenario file; errors name the file and the key path."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8: {exc}", reason=Lab.LAB_SCENARIO_SYNTAX) from None
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read: {exc.strerror}", reason=Lab.LAB_SCENARIO_NOT_FOUND
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{file}: not valid TOML: {exc}", reason=Lab.LAB_SCENARIO_SYNTAX
        ) from None
    try:
        return scenario_from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(
            f"{file}: {exc.args[0]}", reason=exc.reason, context=exc.context | {"file": file}
        ) from None


def scenario_from_mapping(data: Mapping[str, Any]) -> Scenario:
    """The same rules as :func:`load_scenario`, on already parsed TOML."""
    _known(data, Scenario, "")
    if "name" not in data or "partitions" not in data:
        missing = "name" if "name" not in data else "partitions"
        raise bad(missing, None, "required key is missing", Lab.LAB_MISSING_KEY)
    values: dict[str, Any] = dict(data)
    for key, cls in _TABLES.items():
        if key in data:
            values[key] = _table(data[key], cls, key)
    values["outages"] = tuple(
        _table(_outage(raw, f"outages[{i}]"), Outage, f"outages[{i}]")
        for i, raw in enumerate(_array(data.get("outages", []), "outages"))
    )
    values["restarts"] = tuple(
        _table(raw, Restart, f"restarts[{i}]")
        for i, raw in enumerate(_array(data.get("restarts", []), "restarts"))
    )
    return _build(Scenario, values, "")


def _array(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise bad(key, value, f"must be an array of tables ([[{key}]])")
    return value


def _outage(raw: Any, at: str) -> Any:
    if isinstance(raw, dict) and "members" in raw:
        members = raw["members"]
        if members == "all":
            return {k: v for k, v in raw.items() if k != "members"}
        if not isinstance(members, list) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in members
        ):
            raise bad(f"{at}.members", members, '"all" or a list of member indices')
        return dict(raw, members=tuple(members))
    return raw


def _table(raw: Any, cls: type[T], at: str) -> T:
    if not isinstance(raw, dict):
        raise bad(at, raw, f"must be a table ([{at}])")
    _known(raw, cls, at + ".")
    values = dict(raw)
    family = at.split("[", maxsplit=1)[0]
    for key, value in raw.items():
        enum_cls = _ENUMS.get(f"{key}@{family}")
        if enum_cls is not None:
            try:
                values[key] = enum_cls(value)
            except ValueError:
                choices = ", ".join(e.value for e in enum_cls)
                raise bad(f"{at}.{key}", value, f"must be one of {choices}") from None
        elif isinstance(value, list):
            values[key] = tuple(value)
    return _build(cls, values, at + ".")


def _build(cls: type[T], values: Mapping[str, Any], at: str) -> T:
    try:
        return cls(**values)
    except ConfigError as exc:
        key = str(exc.context.get("key", ""))
        if not at or key.startswith(at):
            raise
        raise bad(
            at + key,
            exc.context.get("value"),
            str(exc.context.get("detail", "")),
            Lab(exc.reason),
        ) from None
    except TypeError as exc:  # a required field is absent
        raise bad(at.rstrip("."), None, f"incomplete table: {exc}", Lab.LAB_MISSING_KEY) from None


def _known(table: Mapping[str, Any], cls: Any, at: str) -> None:
    names = tuple(f.name for f in fields(cls))
    for key in table:
        if key not in names:
            raise bad(
                at + key,
                table[key],
                f"unknown key (known: {', '.join(names)})",
                Lab.LAB_UNKNOWN_KEY,
            )
