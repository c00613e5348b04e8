"""Reading fleet.toml: the edge where a host's configuration enters (the ``fleet`` commands).

:func:`load_config` reads the file, lays CLI overrides over its top-level keys and binds the
result onto a :class:`~pipeline.host.gateway_config.GatewayConfig` with the strict binder
(:func:`pipeline.support.binder.bind`): unknown keys are errors, and every message names the
file (or ``overrides``), the key path and the reason code (the list is in
:mod:`pipeline.host.gateway_config`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def load_config(
    path: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Read a gateway TOML file; ``overrides`` (e.g. CLI flags) replace top-level keys.
    ``environ`` (default: the process environment) is where ``sasl_password_env`` is looked up."""
    file = str(path)
    data = read_toml(path, CONFIG_REASONS)
    given = {k for k, v in (overrides or {}).items() if v is not None}
    try:
        return config_from_mapping(
            data, overrides=overrides, environ=os.environ if environ is None else environ
        )
    except ConfigError as exc:
        key = str(exc.context.get("key", ""))
        source = "overrides" if re.split(r"[.\[]", key)[0] in given else file
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
