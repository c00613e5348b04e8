"""Gateway configuration: frozen, keyword-only value objects, and the TOML loader for the edge.

Only the CLI entry point reads a file (:func:`load_config`); everything else receives a
:class:`GatewayConfig`. The value objects validate themselves, so a config built in code is held
to the same rules as one read from TOML. Unknown keys are errors, never ignored: a typo in a
safety setting must not silently fall back to a default.

Reason codes (public API, all on :class:`~pipeline.errors.ConfigError`)::

    CONFIG_NOT_FOUND         the file cannot be read
    CONFIG_SYNTAX            the file is not valid TOML (or not UTF-8)
    CONFIG_UNKNOWN_KEY       a key this version does not know (typo?)
    CONFIG_MISSING_KEY       a required key is absent (host, gid, role, delivery, type, ...)
    CONFIG_INVALID           a value of the wrong type or out of range
    CONFIG_DUPLICATE_GID     two entities share a global id
    CONFIG_MISSING_INJECTOR  an entity with delivery "inject" has no injector
    CONFIG_UNKNOWN_CALLBACK  a callback injector names no registered callable (build_injector)
    INVALID_NAME             a host id, gid or group outside the safe charset

Every message names the file, the key path (``entities[1].injector.pane``) and the bad value.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from pipeline.errors import ConfigError
from pipeline.kafka.names import check_name
from pipeline.kafka.security import PLAINTEXT, KafkaSecurity, security_from_table
from pipeline.presence.roles import ENTITY_DELIVERIES, ENTITY_ROLES, Delivery, Role
from pipeline.reasons import Config
from pipeline.retention.policy import RetentionConfig

_MISSING: Any = object()
T = TypeVar("T")
INJECTOR_TYPES = ("callback", "command", "tmux")
ALL_GROUP = "all"  # every local entity is a member (seed 000 U8: ``broadcast.all``)
# A gid is a Kafka record key and a roster key. Dots separate words but never precede "_", so a
# gid cannot collide with the gateway's own roster key ``<host>._gateway``; ``broadcast.`` keys
# carry group broadcasts, so that prefix is reserved.
_GID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?=[A-Za-z0-9])){0,127}$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_BOOTSTRAP = re.compile(r"^[^,\s]+:\d{1,5}(,[^,\s]+:\d{1,5})*$")


def invalid(key: str, value: Any, detail: str, reason: str = Config.CONFIG_INVALID) -> ConfigError:
    """A ConfigError whose context carries the key path, the bad value and the detail."""
    shown = f"{key}: {detail}" if value is _MISSING else f"{key} = {value!r}: {detail}"
    ctx = {"key": key, "detail": detail} | ({} if value is _MISSING else {"value": value})
    return ConfigError(shown, reason=reason, context=ctx)


def check_gid(value: Any, *, key: str = "gid") -> str:
    """Global ids: letters, digits, '-', '_', single dots between words; max 128 chars."""
    if not isinstance(value, str) or not _GID.match(value) or value.startswith("broadcast."):
        raise invalid(
            key,
            value,
            "a gid uses letters, digits, '-', '_' and dots between words (max 128), "
            "and does not start with 'broadcast.'",
            Config.INVALID_NAME,
        )
    return value


def _name(value: Any, key: str, what: str) -> str:
    if not isinstance(value, str):
        raise invalid(key, value, f"{what} must be a string")
    try:
        return check_name(value, what=what)
    except ConfigError as exc:
        raise invalid(key, value, str(exc.args[0]), exc.reason) from None


def _number(value: Any, key: str, *, minimum: float = 0.0, strict: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(key, value, "must be a number")
    if value < minimum or (strict and value == minimum):
        raise invalid(key, value, f"must be {'>' if strict else '>='} {minimum:g}")


def _text(value: Any, key: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, str) or not value or any(c.isspace() for c in value[:1] + value[-1:]):
        raise invalid(key, value, "must be a non-empty string without surrounding spaces")


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise invalid(key, value, "must be a list of non-empty strings")
    return value


@dataclass(frozen=True, kw_only=True)
class InjectorSpec:
    """How the gateway injects into one worker (seed 000 §5: a local, status-gated inject).

    ``command`` -- argv for type command; ``pane``/``idle_pattern``/``socket`` (tmux ``-L``) for
    type tmux; ``callback`` -- the name of a callable registered in code for type callback.
    """

    type: Literal["callback", "command", "tmux"]
    command: tuple[str, ...] = ()
    pane: str | None = None
    idle_pattern: str | None = None
    timeout_s: float = 10.0
    socket: str | None = None
    callback: str | None = None

    def __post_init__(self) -> None:
        if self.type not in INJECTOR_TYPES:
            raise invalid("type", self.type, f"must be one of {', '.join(INJECTOR_TYPES)}")
        _number(self.timeout_s, "timeout_s")
        _strings(self.command, "command")
        own: dict[str, tuple[str, ...]] = {
            "callback": ("callback",),
            "command": ("command",),
            "tmux": ("pane", "idle_pattern", "socket"),
        }
        for key in ("command", "pane", "idle_pattern", "socket", "callback"):
            value = getattr(self, key)
            if value not in (None, ()) and key not in own[self.type]:
                raise invalid(key, value, f"does not apply to an injector of type {self.type!r}")
        if self.type == "command" and not self.command:
            raise invalid(
                "command", _MISSING, "type command needs an argv list", Config.CONFIG_MISSING_KEY
            )
        if self.type == "tmux":
            if self.pane is None:
                raise invalid(
                    "pane", _MISSING, "type tmux needs a pane target", Config.CONFIG_MISSING_KEY
                )
            _text(self.pane, "pane")
            if self.socket is not None:
                _name(self.socket, "socket", "tmux socket name")
            if self.idle_pattern is not None:
                if not isinstance(self.idle_pattern, str) or not self.idle_pattern:
                    raise invalid("idle_pattern", self.idle_pattern, "must be a non-empty regex")
                try:
                    re.compile(self.idle_pattern)
                except re.error as exc:
                    raise invalid("idle_pattern", self.idle_pattern, f"bad regex: {exc}") from None
        _text(self.callback, "callback", optional=True)


@dataclass(frozen=True, kw_only=True)
class EntityConfig:
    """One local entity; ``injector`` is required exactly when ``delivery`` is ``inject``.

    ``nudge`` (pull entities only) is where the gateway nudges the entity when messages wait
    for it and it has no open pull (seed 000 §3: "hold + nudge"), e.g. the tmux pane of the
    agent whose MCP client drains it.
    """

    gid: str
    role: Role
    delivery: Delivery
    groups: tuple[str, ...] = ()
    injector: InjectorSpec | None = None
    nudge: InjectorSpec | None = None

    def __post_init__(self) -> None:
        check_gid(self.gid)
        if self.role not in ENTITY_ROLES or not isinstance(self.role, Role):
            raise invalid("role", self.role, f"must be one of {', '.join(ENTITY_ROLES)}")
        if self.delivery not in ENTITY_DELIVERIES or not isinstance(self.delivery, Delivery):
            raise invalid(
                "delivery", self.delivery, f"must be one of {', '.join(ENTITY_DELIVERIES)}"
            )
        for i, group in enumerate(_strings(self.groups, "groups")):
            _name(group, f"groups[{i}]", "group")
        if len(set(self.groups)) != len(self.groups):
            raise invalid("groups", self.groups, "lists a group twice")
        if self.delivery is Delivery.INJECT and self.injector is None:
            raise invalid(
                "injector",
                _MISSING,
                "delivery 'inject' needs an injector",
                Config.CONFIG_MISSING_INJECTOR,
            )
        if self.delivery is Delivery.PULL and self.injector is not None:
            raise invalid("injector", self.injector.type, "a pull entity takes no injector")
        if self.delivery is Delivery.INJECT and self.nudge is not None:
            raise invalid("nudge", self.nudge.type, "only a pull entity is nudged")


PLACEHOLDERS = ("gid", "host", "profile", "parent", "job", "budget", "brief_file")
_PLACEHOLDER = re.compile(r"{([^{}]*)}")


def _template(argv: Any, key: str) -> tuple[str, ...]:
    """An argv template: only :data:`PLACEHOLDERS` may appear in braces."""
    for i, part in enumerate(_strings(argv, key)):
        for name in _PLACEHOLDER.findall(part):
            if name not in PLACEHOLDERS:
                raise invalid(
                    f"{key}[{i}]",
                    part,
                    f"unknown placeholder {{{name}}} (known: "
                    + ", ".join("{" + n + "}" for n in PLACEHOLDERS)
                    + ")",
                )
    return tuple(argv)


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """A spawn profile (seed 000 §7.8, §8 step 5): how this host launches, stops and injects a
    worker, and its caps (seed 001 scenario 8: a cap on subagents per parent and per job, and a
    spawn budget per job). ``launch``/``stop``/``check`` and the injector's strings are argv
    templates over :data:`PLACEHOLDERS`."""

    name: str
    description: str = ""
    launch: tuple[str, ...]
    stop: tuple[str, ...] = ()
    check: tuple[str, ...] = ()
    injector: InjectorSpec
    groups: tuple[str, ...] = ()
    max_live_per_parent: int = 8
    max_live_per_job: int = 32
    max_spawns_per_job: int = 64

    def __post_init__(self) -> None:
        _name(self.name, "name", "profile name")
        if not isinstance(self.description, str):
            raise invalid("description", self.description, "must be a string")
        if not self.launch:
            raise invalid(
                "launch", _MISSING, "a profile needs a launch argv", Config.CONFIG_MISSING_KEY
            )
        for key in ("launch", "stop", "check"):
            _template(getattr(self, key), key)
        if not isinstance(self.injector, InjectorSpec):
            raise invalid("injector", self.injector, "must be an injector table")
        _template(self.injector.command, "injector.command")
        for i, group in enumerate(_strings(self.groups, "groups")):
            _name(group, f"groups[{i}]", "group")
        for key in ("max_live_per_parent", "max_live_per_job", "max_spawns_per_job"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise invalid(key, value, "must be an integer >= 1")


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """One host's gateway. ``<host>`` in ``store_url``/``key_file``/``trust_dir`` is replaced."""

    host: str
    bootstrap: str = "127.0.0.1:9092"
    store_url: str = "sqlite:///fleet-<host>.sqlite"
    topic_prefix: str = "fleet."
    key_file: str | None = None
    trust_dir: str | None = None
    inject_deadline_s: float = 30.0
    # briefs of one entity journaled as one burst (docs/gateway.md "The inject journal")
    inject_burst: int = 8
    max_held_per_recipient: int = 10000
    max_ttl_s: float = 86400
    clock_skew_s: float = 30
    presence_interval_s: float = 5.0
    presence_ttl_s: float = 20.0
    sweep_interval_s: float = 5.0
    nudge_initial_s: float = 5.0
    nudge_max_s: float = 300.0
    entities: tuple[EntityConfig, ...] = ()
    profiles: tuple[ProfileConfig, ...] = ()
    spawn_deadline_s: float = 60.0
    # [retention]: docs/store.md, bounded stores
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    kafka: KafkaSecurity = PLAINTEXT  # the [kafka] table: login, TLS, pass-through properties
    # the local socket (docs/gateway.md): None = next to a SQLite store, "" = none
    socket_path: str | None = None
    socket_mode: int = 0o600
    # the pairwise MAC mode (docs/envelope.md): off by default, opt in per fleet
    pairwise_mac: bool = False

    def __post_init__(self) -> None:
        _name(self.host, "host", "host id")
        if not isinstance(self.retention, RetentionConfig):
            raise invalid("retention", self.retention, "must be a table ([retention])")
        if not isinstance(self.kafka, KafkaSecurity):
            raise invalid("kafka", type(self.kafka).__name__, "must be a [kafka] table")
        if not isinstance(self.bootstrap, str) or not _BOOTSTRAP.match(self.bootstrap):
            raise invalid("bootstrap", self.bootstrap, "must be host:port[,host:port...]")
        if not isinstance(self.topic_prefix, str) or not _PREFIX.match(self.topic_prefix):
            raise invalid("topic_prefix", self.topic_prefix, "use letters, digits, '.', '_', '-'")
        for key in ("store_url", "key_file", "trust_dir", "socket_path"):
            value = getattr(self, key)
            if not (key == "socket_path" and value == ""):  # "": no local socket
                _text(value, key, optional=key != "store_url")
            if value is not None:
                object.__setattr__(self, key, value.replace("<host>", self.host))
        if not isinstance(self.pairwise_mac, bool):
            raise invalid("pairwise_mac", self.pairwise_mac, "must be true or false")
        if self.socket_mode not in (0o600, 0o660) or isinstance(self.socket_mode, bool):
            raise invalid(
                "socket_mode",
                self.socket_mode,
                "use 0o600 (the gateway's user) or 0o660 (and its group)",
            )
        names = [p.name for p in self.profiles if isinstance(p, ProfileConfig)]
        if len(names) != len(self.profiles):
            raise invalid("profiles", self.profiles, "must be a list of profile tables")
        for i, name in enumerate(names):
            if name in names[:i]:
                raise invalid(f"profiles[{i}].name", name, "profile name used twice")
        for key in (
            "spawn_deadline_s",
            "inject_deadline_s",
            "max_ttl_s",
            "presence_interval_s",
            "sweep_interval_s",
            "nudge_initial_s",
        ):
            _number(getattr(self, key), key)
        _number(self.nudge_max_s, "nudge_max_s", minimum=self.nudge_initial_s, strict=False)
        _number(self.clock_skew_s, "clock_skew_s", strict=False)
        _number(self.presence_ttl_s, "presence_ttl_s", minimum=self.presence_interval_s)
        if not isinstance(self.max_held_per_recipient, int):
            raise invalid(
                "max_held_per_recipient", self.max_held_per_recipient, "must be an integer"
            )
        _number(self.max_held_per_recipient, "max_held_per_recipient")
        if not isinstance(self.inject_burst, int) or isinstance(self.inject_burst, bool):
            raise invalid("inject_burst", self.inject_burst, "must be an integer")
        _number(self.inject_burst, "inject_burst")
        if not isinstance(self.entities, tuple):
            raise invalid("entities", self.entities, "must be a list of entity tables")
        seen: set[str] = set()
        for i, entity in enumerate(self.entities):
            if not isinstance(entity, EntityConfig):
                raise invalid(f"entities[{i}]", entity, "must be an EntityConfig")
            if entity.gid in seen:
                raise invalid(
                    f"entities[{i}].gid", entity.gid, "gid used twice", Config.CONFIG_DUPLICATE_GID
                )
            seen.add(entity.gid)

    @property
    def local_socket(self) -> str | None:
        """Where the gateway serves local sends: ``socket_path``, else ``<store file>.sock`` for
        a SQLite store; ``None`` when there is none (``socket_path = ""``, or PostgreSQL without
        a ``socket_path``)."""
        if self.socket_path is not None:
            return self.socket_path or None
        prefix = "sqlite:///"
        if self.store_url.startswith(prefix) and len(self.store_url) > len(prefix):
            db = self.store_url[len(prefix) :].split("?", 1)[0]
            if db != ":memory:":
                return f"{db}.sock"
        return None


def load_config(
    path: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Read a gateway TOML file; ``overrides`` (e.g. CLI flags) replace top-level keys.
    ``environ`` (default: the process environment) is where ``sasl_password_env`` is looked up."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text: {exc}", reason=Config.CONFIG_SYNTAX) from None
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read: {exc.strerror}", reason=Config.CONFIG_NOT_FOUND
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}", reason=Config.CONFIG_SYNTAX) from None
    given = {k for k, v in (overrides or {}).items() if v is not None}
    try:
        return config_from_mapping(
            data, overrides=overrides, environ=os.environ if environ is None else environ
        )
    except ConfigError as exc:
        key = str(exc.context.get("key", ""))
        source = "overrides" if re.split(r"[.\[]", key)[0] in given else file
        raise ConfigError(
            f"{source}: {exc.args[0]}", reason=exc.reason, context=exc.context | {"file": source}
        ) from None


def config_from_mapping(
    data: Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Build a :class:`GatewayConfig` from parsed TOML (the same rules as :func:`load_config`)."""
    merged = dict(data)
    for key, value in (overrides or {}).items():
        tables = ("entities", "profiles", "retention", "kafka")
        if key in tables or key not in _field_names(GatewayConfig):
            raise invalid(
                f"overrides.{key}", value, "not an overridable key", Config.CONFIG_UNKNOWN_KEY
            )
        if value is not None:
            merged[key] = value
    _known(merged, GatewayConfig, "")
    _required(merged, ("host",), "")
    entities = merged.get("entities", [])
    if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
        raise invalid("entities", entities, "must be an array of tables ([[entities]])")
    merged["entities"] = tuple(_entity(raw, f"entities[{i}].") for i, raw in enumerate(entities))
    profiles = merged.get("profiles", [])
    if not isinstance(profiles, list) or not all(isinstance(p, dict) for p in profiles):
        raise invalid("profiles", profiles, "must be an array of tables ([[profiles]])")
    merged["profiles"] = tuple(_profile(raw, f"profiles[{i}].") for i, raw in enumerate(profiles))
    retention = merged.get("retention", {})
    if not isinstance(retention, dict):
        raise invalid("retention", retention, "must be a table ([retention])")
    _known(retention, RetentionConfig, "retention.")
    merged["retention"] = _build(RetentionConfig, retention, "retention.")
    if "kafka" in merged:
        merged["kafka"] = security_from_table(merged["kafka"], environ=environ or {})
    return _build(GatewayConfig, merged, "")


def _entity(raw: dict[str, Any], at: str) -> EntityConfig:
    _known(raw, EntityConfig, at)
    _required(raw, ("gid", "role", "delivery"), at)
    values = dict(raw)
    values["role"] = _enum(Role, ENTITY_ROLES, raw["role"], at + "role")
    values["delivery"] = _enum(Delivery, ENTITY_DELIVERIES, raw["delivery"], at + "delivery")
    values["groups"] = _tuple(raw.get("groups", ()))
    for name in ("injector", "nudge"):
        spec = raw.get(name)
        if spec is not None:
            values[name] = _injector(spec, raw["gid"], f"{at}{name}")
    return _build(EntityConfig, values, at)


def _injector(spec: Any, gid: str, at: str) -> InjectorSpec:
    if not isinstance(spec, dict):
        raise invalid(at, spec, f"must be a table ([entities.{at.rsplit('.', 1)[-1]}])")
    _known(spec, InjectorSpec, at + ".")
    _required(spec, ("type",), at + ".")
    spec = dict(spec, command=_tuple(spec.get("command", ())))
    if spec["type"] == "callback":
        spec.setdefault("callback", gid)  # a code-registered callable, named by gid
    return _build(InjectorSpec, spec, at + ".")


def _profile(raw: dict[str, Any], at: str) -> ProfileConfig:
    _known(raw, ProfileConfig, at)
    _required(raw, ("name", "launch", "injector"), at)
    values = {k: _tuple(v) for k, v in raw.items()}
    spec = raw["injector"]
    if not isinstance(spec, dict):
        raise invalid(at + "injector", spec, "must be a table ([profiles.injector])")
    _known(spec, InjectorSpec, at + "injector.")
    _required(spec, ("type",), at + "injector.")
    values["injector"] = _build(
        InjectorSpec, dict(spec, command=_tuple(spec.get("command", ()))), at + "injector."
    )
    return _build(ProfileConfig, values, at)


def _build(cls: type[T], values: Mapping[str, Any], at: str) -> T:
    try:
        return cls(**values)
    except ConfigError as exc:
        if not at:
            raise
        key = str(exc.context.get("key", ""))
        value = exc.context.get("value", _MISSING)
        raise invalid(at + key, value, str(exc.context.get("detail", "")), exc.reason) from None


def _field_names(cls: Any) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _known(table: Mapping[str, Any], cls: Any, at: str) -> None:
    names = _field_names(cls)
    for key in table:
        if key not in names:
            known = ", ".join(names)
            raise invalid(
                at + key, table[key], f"unknown key (known: {known})", Config.CONFIG_UNKNOWN_KEY
            )


def _required(table: Mapping[str, Any], keys: tuple[str, ...], at: str) -> None:
    for key in keys:
        if key not in table:
            raise invalid(at + key, _MISSING, "required key is missing", Config.CONFIG_MISSING_KEY)


def _enum(cls: type[Role] | type[Delivery], allowed: tuple[str, ...], value: Any, key: str) -> Any:
    """``value`` as a member of ``cls``, accepted only if it is one of ``allowed``."""
    if isinstance(value, str) and value in allowed:
        return cls(value)
    raise invalid(key, value, f"must be one of {', '.join(allowed)}")


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
