"""Reading fleet.toml: the edge where a host's configuration enters (the ``fleet`` commands).

:func:`load_config` reads the file, lays ``FLEET_<KEY>`` environment variables and then CLI
overrides over its top-level keys (:func:`env_overrides`: the scalar keys only) and binds the
result onto a :class:`~pipeline.host.gateway_config.GatewayConfig` with the strict binder
(:func:`pipeline.support.binder.bind`): unknown keys are errors, and every message names the
file (or ``overrides``), the key path and the reason code (the list is in
:mod:`pipeline.host.gateway_config`).
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pipeline.errors import ConfigError
from pipeline.kafka.security import security_from_table
from pipeline.reasons import Config
from pipeline.support.binder import (
    CONFIG_REASONS,
    bind,
    config_error,
    field_names,
    in_file,
    read_toml,
)

from .gateway_config import GatewayConfig

_TABLES = ("entities", "profiles", "retention", "kafka")  # never a CLI override
ENV_PREFIX: Final = "FLEET_"
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def env_name(key: str) -> str:
    """The environment variable that overrides top-level ``key`` (``store_url``:
    ``FLEET_STORE_URL``)."""
    return ENV_PREFIX + key.upper()


def overridable_keys() -> dict[str, type]:
    """The top-level keys the environment may override, with the scalar type each takes: every
    key that is a string, number or boolean (not the tables)."""
    hints = typing.get_type_hints(GatewayConfig)
    out: dict[str, type] = {}
    for name in field_names(GatewayConfig):
        hint = hints[name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = inner[0] if len(inner) == 1 else hint
        if name not in _TABLES and hint in (str, int, float, bool):
            out[name] = hint
    return out


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``FLEET_<KEY>`` variables (non-empty) as top-level overrides, converted to the key's
    type: an integer as Python writes it (``0o660`` too), a number, ``true``/``false``."""
    out: dict[str, Any] = {}
    for key, kind in overridable_keys().items():
        text = environ.get(env_name(key), "")
        if not text:
            continue
        out[key] = _scalar(kind, text.strip(), env_name(key))
    return out


def _scalar(kind: type, text: str, name: str) -> Any:
    if kind is str:
        return text
    if kind is bool:
        if text.lower() not in _TRUE + _FALSE:
            raise config_error(name, text, "must be true or false", Config.CONFIG_INVALID)
        return text.lower() in _TRUE
    try:
        return int(text, 0) if kind is int else float(text)
    except ValueError:
        detail = "must be an integer" if kind is int else "must be a number"
        raise config_error(name, text, detail, Config.CONFIG_INVALID) from None


def load_config(
    path: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Read a gateway TOML file; ``FLEET_<KEY>`` variables of ``environ`` (default: the process
    environment) and then ``overrides`` (e.g. CLI flags) replace top-level keys. ``environ`` is
    also where ``sasl_password_env`` is looked up."""
    file = str(path)
    env = os.environ if environ is None else environ
    data = read_toml(path, CONFIG_REASONS)
    try:
        from_env = env_overrides(env)
    except ConfigError as exc:
        raise in_file(exc, "environment") from None
    given = {k for k, v in (overrides or {}).items() if v is not None}
    merged = from_env | {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        return config_from_mapping(data, overrides=merged, environ=env)
    except ConfigError as exc:
        key = str(exc.context.get("key", ""))
        top = re.split(r"[.\[]", key)[0]
        source = (
            "overrides"
            if top in given
            else f"environment {env_name(top)}"
            if top in from_env
            else file
        )
        raise in_file(exc, source) from None


def config_from_mapping(
    data: Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Build a :class:`GatewayConfig` from parsed TOML (the same rules as :func:`load_config`)."""
    merged = dict(data)
    for key, value in (overrides or {}).items():
        if key in _TABLES or key not in field_names(GatewayConfig):
            raise config_error(
                f"overrides.{key}", value, "not an overridable key", Config.CONFIG_UNKNOWN_KEY
            )
        if value is not None:
            merged[key] = value
    entities = merged.get("entities")
    if isinstance(entities, list):
        merged["entities"] = [_callbacks_by_gid(raw) for raw in entities]
    return bind(
        GatewayConfig,
        merged,
        convert={"kafka": lambda table, _key: security_from_table(table, environ=environ or {})},
    )


def _callbacks_by_gid(raw: Any) -> Any:
    """A callback injector without a ``callback`` names the callable registered for its gid."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    for name in ("injector", "nudge"):
        spec = raw.get(name)
        if isinstance(spec, dict) and spec.get("type") == "callback" and "gid" in raw:
            out[name] = {"callback": raw["gid"]} | spec
    return out
