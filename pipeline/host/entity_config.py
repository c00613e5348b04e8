"""The processes a host runs, as config: local entities, their injectors, spawn profiles.

Frozen, keyword-only value objects that validate themselves (``[[entities]]`` and
``[[profiles]]`` of fleet.toml; :mod:`pipeline.host.config` binds them from the file). The
reason codes are those listed in :mod:`pipeline.host.gateway_config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.presence.roles import ENTITY_DELIVERIES, ENTITY_ROLES, Delivery, Role
from pipeline.reasons import Config
from pipeline.support.binder import MISSING, config_error

from .config_checks import check_gid, check_number, check_text, checked_name, checked_strings

INJECTOR_TYPES = ("callback", "command", "tmux")
COMMAND_MODES = ("one-shot", "long-lived")  # a process per brief, or one child for all
ALL_GROUP = "all"  # every local entity is a member: ``broadcast.all`` (R-TOP-6)


@dataclass(frozen=True, kw_only=True)
class InjectorSpec:
    """How the gateway injects into one worker (R-ACK-6: a local, status-gated inject).

    ``command`` -- argv for type command; ``pane``/``idle_pattern``/``socket`` (tmux ``-L``) for
    type tmux; ``callback`` -- the name of a callable registered in code for type callback.
    ``mode`` (type command): ``one-shot`` runs the command per brief, ``long-lived`` runs it once
    and writes it one framed brief after another (docs/injectors.md).
    """

    type: Literal["callback", "command", "tmux"]
    command: tuple[str, ...] = ()
    pane: str | None = None
    idle_pattern: str | None = None
    timeout_s: float = 10.0
    socket: str | None = None
    callback: str | None = None
    mode: Literal["one-shot", "long-lived"] = "one-shot"

    def __post_init__(self) -> None:
        if self.type not in INJECTOR_TYPES:
            raise config_error("type", self.type, f"must be one of {', '.join(INJECTOR_TYPES)}")
        check_number(self.timeout_s, "timeout_s")
        checked_strings(self.command, "command")
        own: dict[str, tuple[str, ...]] = {
            "callback": ("callback",),
            "command": ("command",),
            "tmux": ("pane", "idle_pattern", "socket"),
        }
        for key in ("command", "pane", "idle_pattern", "socket", "callback"):
            value = getattr(self, key)
            if value not in (None, ()) and key not in own[self.type]:
                raise config_error(
                    key, value, f"does not apply to an injector of type {self.type!r}"
                )
        if self.mode not in COMMAND_MODES:
            raise config_error("mode", self.mode, f"must be one of {', '.join(COMMAND_MODES)}")
        if self.mode != "one-shot" and self.type != "command":
            raise config_error(
                "mode", self.mode, f"does not apply to an injector of type {self.type!r}"
            )
        if self.type == "command" and not self.command:
            raise config_error(
                "command", MISSING, "type command needs an argv list", Config.CONFIG_MISSING_KEY
            )
        if self.type == "tmux":
            if self.pane is None:
                raise config_error(
                    "pane", MISSING, "type tmux needs a pane target", Config.CONFIG_MISSING_KEY
                )
            check_text(self.pane, "pane")
            if self.socket is not None:
                checked_name(self.socket, "socket", "tmux socket name")
            if self.idle_pattern is not None:
                if not isinstance(self.idle_pattern, str) or not self.idle_pattern:
                    raise config_error(
                        "idle_pattern", self.idle_pattern, "must be a non-empty regex"
                    )
                try:
                    re.compile(self.idle_pattern)
                except re.error as exc:
                    raise config_error(
                        "idle_pattern", self.idle_pattern, f"bad regex: {exc}"
                    ) from None
        check_text(self.callback, "callback", optional=True)


@dataclass(frozen=True, kw_only=True)
class EntityConfig:
    """One local entity; ``injector`` is required exactly when ``delivery`` is ``inject``.

    ``nudge`` (pull entities only) is where the gateway nudges the entity when messages wait
    for it and it has no open pull (R-HOLD-2: hold and nudge), e.g. the tmux pane of the
    agent whose MCP client drains it.
    """

    gid: str = field(metadata={"reason": Config.INVALID_NAME})  # the binder's code for a non-str
    role: Role = field(metadata={"choices": ENTITY_ROLES})  # the binder offers these
    delivery: Delivery = field(metadata={"choices": ENTITY_DELIVERIES})
    groups: tuple[str, ...] = ()
    injector: InjectorSpec | None = None
    nudge: InjectorSpec | None = None

    def __post_init__(self) -> None:
        check_gid(self.gid)
        if self.role not in ENTITY_ROLES or not isinstance(self.role, Role):
            raise config_error("role", self.role, f"must be one of {', '.join(ENTITY_ROLES)}")
        if self.delivery not in ENTITY_DELIVERIES or not isinstance(self.delivery, Delivery):
            raise config_error(
                "delivery", self.delivery, f"must be one of {', '.join(ENTITY_DELIVERIES)}"
            )
        for i, group in enumerate(checked_strings(self.groups, "groups")):
            checked_name(group, f"groups[{i}]", "group")
        if len(set(self.groups)) != len(self.groups):
            raise config_error("groups", self.groups, "lists a group twice")
        if self.delivery is Delivery.INJECT and self.injector is None:
            raise config_error(
                "injector",
                MISSING,
                "delivery 'inject' needs an injector",
                Config.CONFIG_MISSING_INJECTOR,
            )
        if self.delivery is Delivery.PULL and self.injector is not None:
            raise config_error("injector", self.injector.type, "a pull entity takes no injector")
        if self.delivery is Delivery.INJECT and self.nudge is not None:
            raise config_error("nudge", self.nudge.type, "only a pull entity is nudged")


PLACEHOLDERS = ("gid", "host", "profile", "parent", "job", "budget", "brief_file")
_PLACEHOLDER = re.compile(r"{([^{}]*)}")


def _template(argv: Any, key: str) -> tuple[str, ...]:
    """An argv template: only :data:`PLACEHOLDERS` may appear in braces."""
    for i, part in enumerate(checked_strings(argv, key)):
        for name in _PLACEHOLDER.findall(part):
            if name not in PLACEHOLDERS:
                raise config_error(
                    f"{key}[{i}]",
                    part,
                    f"unknown placeholder {{{name}}} (known: "
                    + ", ".join("{" + n + "}" for n in PLACEHOLDERS)
                    + ")",
                )
    return tuple(argv)


@dataclass(frozen=True, kw_only=True)
class SpawnAllowed:
    """Who may spawn a profile (``spawn_allowed`` of a ``[[profiles]]`` table): a requester whose
    roster role, gid or host is listed. Absent: anyone (docs/lifecycle.md "Authority")."""

    roles: tuple[Role, ...] = field(default=(), metadata={"choices": ENTITY_ROLES})
    gids: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for i, role in enumerate(checked_strings(self.roles, "roles")):
            if role not in ENTITY_ROLES:
                raise config_error(f"roles[{i}]", role, f"must be one of {', '.join(ENTITY_ROLES)}")
        for i, gid in enumerate(checked_strings(self.gids, "gids")):
            check_gid(gid, key=f"gids[{i}]")
        for i, host in enumerate(checked_strings(self.hosts, "hosts")):
            checked_name(host, f"hosts[{i}]", "host id")

    def admits(self, *, role: str | None, gid: str, host: str) -> bool:
        return role in self.roles or gid in self.gids or host in self.hosts


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """A spawn profile (R-SPAWN-4, carried in the host's presence entry: R-PRES-1): how this
    host launches, stops and injects a worker, and its caps (R-SPAWN-5, R-FAIL-8: a cap on
    subagents per parent and per job, and a spawn budget per job). ``launch``/``stop``/``check``
    and the injector's strings are argv templates over :data:`PLACEHOLDERS`."""

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
    spawn_allowed: SpawnAllowed | None = None  # None: anyone may spawn it

    def __post_init__(self) -> None:
        checked_name(self.name, "name", "profile name")
        if self.spawn_allowed is not None and not isinstance(self.spawn_allowed, SpawnAllowed):
            raise config_error("spawn_allowed", self.spawn_allowed, "must be a table")
        if not isinstance(self.description, str):
            raise config_error("description", self.description, "must be a string")
        if not self.launch:
            raise config_error(
                "launch", MISSING, "a profile needs a launch argv", Config.CONFIG_MISSING_KEY
            )
        for key in ("launch", "stop", "check"):
            _template(getattr(self, key), key)
        if not isinstance(self.injector, InjectorSpec):
            raise config_error("injector", self.injector, "must be an injector table")
        _template(self.injector.command, "injector.command")
        for i, group in enumerate(checked_strings(self.groups, "groups")):
            checked_name(group, f"groups[{i}]", "group")
        for key in ("max_live_per_parent", "max_live_per_job", "max_spawns_per_job"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise config_error(key, value, "must be an integer >= 1")
