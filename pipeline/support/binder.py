"""The one strict binder: a parsed TOML table onto a frozen, keyword-only dataclass.

Every configuration file of the package (fleet.toml, its ``[kafka]`` and ``[retention]`` tables,
the lab's scenarios) is read through here, so the rules are written once:

* an unknown key is an error, never ignored (a typo in a safety setting must not silently fall
  back to a default); a field without a default is a required key;
* the field's annotation decides the shape: a dataclass is a table, ``tuple[D, ...]`` of a
  dataclass an array of tables, ``tuple[X, ...]`` an array, a ``StrEnum`` or ``Literal`` one of
  its values, ``str``/``int``/``float``/``bool`` that scalar (``int`` is not ``bool``; a
  ``float`` takes an ``int``). A field's metadata may narrow an enum (``"choices"``) or give
  a wrong value of it its own reason code (``"reason"``, e.g. ``INVALID_NAME`` for a gid). Ranges and cross-field rules stay in the dataclass's own
  ``__post_init__``, so a value built in code is held to them too;
* every error is a :class:`~pipeline.errors.ConfigError` whose message and context name the key
  path (``entities[1].injector.pane``), the bad value and the detail, with the caller's reason
  code (:class:`Reasons`: the ``Config`` family, the ``Lab`` family, ...); :func:`in_file` adds
  the file.

An error a nested dataclass raises about its own key (``pane``) is re-keyed under the table's
path. A value object that knows its own table (``kafka.``, ``retention.``) may name the full path
itself; a key that already starts with the table's path is left as it is.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from pipeline.errors import ConfigError
from pipeline.reasons import Config

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: "no value": the key is absent. A message then names the key alone, without ``= value``.
MISSING: Final[Any] = _Missing()
#: What a message shows instead of a value that must not be echoed (a secret's table).
HIDDEN: Final = "(hidden)"
#: ``(value, key path) -> bound value``: a field the binder does not bind from its annotation.
Converter = Callable[[Any, str], Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reasons:
    """The reason codes one family of files uses, one per kind of mistake."""

    not_found: str  # the file cannot be read
    syntax: str  # not TOML, not UTF-8
    unknown_key: str
    missing_key: str
    invalid: str  # a value of the wrong type or out of range


CONFIG_REASONS: Final = Reasons(
    not_found=Config.CONFIG_NOT_FOUND,
    syntax=Config.CONFIG_SYNTAX,
    unknown_key=Config.CONFIG_UNKNOWN_KEY,
    missing_key=Config.CONFIG_MISSING_KEY,
    invalid=Config.CONFIG_INVALID,
)


def config_error(
    key: str, value: Any, detail: str, reason: str = Config.CONFIG_INVALID, **extra: Any
) -> ConfigError:
    """``<key> = <value!r>: <detail>`` (``<key>: <detail>`` for :data:`MISSING`), with the key
    path, the value and the detail in the context (plus ``extra``)."""
    shown = f"{key}: {detail}" if value is MISSING else f"{key} = {value!r}: {detail}"
    ctx = {"key": key, "detail": detail} | ({} if value is MISSING else {"value": value})
    return ConfigError(shown, reason=reason, context=ctx | extra)


def read_toml(path: str | Path, reasons: Reasons) -> dict[str, Any]:
    """The file's TOML document; an unreadable file or bad TOML is an error naming the file."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text: {exc}", reason=reasons.syntax) from None
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read: {exc.strerror}", reason=reasons.not_found
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}", reason=reasons.syntax) from None


def in_file(exc: ConfigError, source: str) -> ConfigError:
    """``exc`` with ``source`` (the file, or ``overrides``) in front of its message and in its
    context; raise it ``from None``."""
    return ConfigError(
        f"{source}: {exc.args[0]}", reason=exc.reason, context=exc.context | {"file": source}
    )


def refuse_unknown(
    table: Mapping[str, Any],
    known: tuple[str, ...],
    *,
    at: str = "",
    reason: str = Config.CONFIG_UNKNOWN_KEY,
    hide_values: bool = False,
) -> None:
    """The first key of ``table`` not in ``known`` is an error naming ``at + key`` and the known
    keys; ``hide_values`` for a table whose values may be credentials."""
    for key in table:
        if key not in known:
            value = HIDDEN if hide_values else table[key]
            raise config_error(at + key, value, f"unknown key (known: {', '.join(known)})", reason)


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The keys a table bound onto ``cls`` may have, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def bind(
    cls: type[T],
    table: Mapping[str, Any],
    *,
    reasons: Reasons = CONFIG_REASONS,
    at: str = "",
    convert: Mapping[str, Converter] | None = None,
) -> T:
    """``table`` as a ``cls``: unknown keys refused, required keys demanded, each value bound by
    its field's annotation (nested tables recursively, their keys under ``at``), then ``cls``
    built, its own checks' errors re-keyed under ``at``. ``convert`` binds named fields of this
    table (not of nested ones) by hand."""
    target: Any = cls  # a dataclass (T is only what the caller gets back)
    declared = dataclasses.fields(target)
    refuse_unknown(table, tuple(f.name for f in declared), at=at, reason=reasons.unknown_key)
    for f in declared:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in table:
            raise config_error(at + f.name, MISSING, "required key is missing", reasons.missing_key)
    hints, converters = _hints(target), convert or {}
    values: dict[str, Any] = {}
    for f in declared:
        if f.name in table:
            converter, key, value = converters.get(f.name), at + f.name, table[f.name]
            if converter is not None:
                values[f.name] = converter(value, key)
            else:
                values[f.name] = _value(hints[f.name], value, key, reasons, f.metadata)
    try:
        return cls(**values)
    except ConfigError as exc:
        raise _rekeyed(exc, at) from None


_NO_META: Final[Mapping[str, Any]] = types.MappingProxyType({})


@functools.cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _value(
    hint: Any, value: Any, key: str, reasons: Reasons, meta: Mapping[str, Any] = _NO_META
) -> Any:
    """``value`` bound by the annotation ``hint`` and the field's ``meta``; what the binder does
    not know passes as is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    wrong = meta.get("reason", reasons.invalid)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value, key, reasons, meta) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, Mapping):
            raise config_error(key, value, "must be a table", wrong)
        return bind(hint, value, reasons=reasons, at=key + ".")
    if origin is tuple:
        return _array(args, value, key, reasons, meta)
    if origin is typing.Literal:
        if value not in args:
            shown = ", ".join(str(a) for a in args)
            raise config_error(key, value, f"must be one of {shown}", wrong)
        return value
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        allowed = meta.get("choices", tuple(hint))
        if not isinstance(value, str) or value not in allowed:
            shown = ", ".join(str(m) for m in allowed)
            raise config_error(key, value, f"must be one of {shown}", wrong)
        return hint(value)
    check = _SCALARS.get(hint)
    if check is not None and not check[0](value):
        raise config_error(key, value, check[1], wrong)
    return value


def _array(
    args: tuple[Any, ...], value: Any, key: str, reasons: Reasons, meta: Mapping[str, Any]
) -> Any:
    element = args[0] if len(args) == 2 and args[1] is Ellipsis else None
    table = dataclasses.is_dataclass(element)
    if not isinstance(value, list | tuple) or (
        table and not all(isinstance(v, Mapping) for v in value)
    ):
        shape = f"an array of tables ([[{key}]])" if table else "a list"
        raise config_error(key, value, f"must be {shape}", meta.get("reason", reasons.invalid))
    if element is None:
        return tuple(value)
    return tuple(_value(element, v, f"{key}[{i}]", reasons, meta) for i, v in enumerate(value))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_SCALARS: Final[dict[Any, tuple[Callable[[Any], bool], str]]] = {
    str: (lambda v: isinstance(v, str), "must be a string"),
    bool: (lambda v: isinstance(v, bool), "must be true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "must be an integer"),
    float: (_number, "must be a number"),
}


def _rekeyed(exc: ConfigError, at: str) -> ConfigError:
    """An error a dataclass raised about its own key, named under the table's path ``at``."""
    if not at:
        return exc
    key = str(exc.context.get("key", ""))
    if key.startswith(at):
        return exc
    extra = {k: v for k, v in exc.context.items() if k not in ("key", "value", "detail")}
    if not key:  # not about one key: the table as a whole
        return config_error(at.rstrip("."), MISSING, str(exc.args[0]), exc.reason, **extra)
    value = exc.context.get("value", MISSING)
    detail = str(exc.context.get("detail", ""))
    return config_error(at + key, value, detail, exc.reason, **extra)
