"""A gateway config (:class:`~pipeline.host.gateway_config.GatewayConfig`) as fleet.toml text
that loads back to it.

The one place the rig (:mod:`.rig`) turns a config into a file. Keys are the config types' own
field names, read from the dataclasses, so a field renamed in the types is renamed here too; a
test holds ``load_config(write(c)) == c``. Only values that differ from a field's default are
written, as a person would write the file. The ``[kafka]`` table is the one place the file and
the type differ: the password is never written, only where it came from (``password_source``:
``sasl_password_file`` or ``sasl_password_env``; the other secrets likewise, from
``secret_sources``), and ``properties`` is a sub-table.
"""

from __future__ import annotations

import enum
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.security import SECRET_SOURCES, KafkaSecurity

from .toml_writer import dumps


def fleet_toml(config: GatewayConfig) -> str:
    """``config`` as fleet.toml text."""
    return dumps(config_table(config))


def config_table(config: GatewayConfig) -> dict[str, Any]:
    """``config`` as the table :func:`pipeline.host.config.config_from_mapping` reads."""
    return _table(config)


def _table(obj: Any) -> dict[str, Any]:
    if isinstance(obj, KafkaSecurity):
        return _kafka_table(obj)
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING  # required: always written
        if value == default:
            continue
        if value is None:
            raise ValueError(f"{f.name}: TOML has no null; leave it at its default")
        out[f.name] = _value(value)
    return out


def _value(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _table(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_value(v) for v in value]
    return value


def _kafka_table(security: KafkaSecurity) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(security):
        value = getattr(security, f.name)
        skipped = ("sasl_password", "properties", "secret_properties", "secret_sources")
        if f.name in skipped or value is None or value == f.default:
            continue
        if f.name == "password_source":
            where, _, source = value.partition(":")
            out[{"file": "sasl_password_file", "env": "sasl_password_env"}[where]] = source
        else:
            out[f.name] = _value(value)
    if security.sasl_password is not None and security.password_source is None:
        raise ValueError("a password goes into no file: give the config a password_source")
    sources = dict(security.secret_sources)
    for key, _ in security.secret_properties:
        where, _, source = sources.get(key, "").partition(":")
        if where not in ("file", "env"):
            raise ValueError(f"{key}: a secret goes into no file: give it a file or a variable")
        out[f"{SECRET_SOURCES[key]}_{where}"] = source
    if security.properties:
        out["properties"] = dict(security.properties)
    return out
