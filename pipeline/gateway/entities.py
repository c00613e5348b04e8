"""The registry of entities living on this host, changed at runtime, read by the gateway."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pipeline.errors import ConfigError
from pipeline.gateway.injectors import InjectMetrics, Injector, build_injector
from pipeline.host.config_checks import check_gid
from pipeline.host.entity_config import ALL_GROUP, EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.topics import check_name
from pipeline.presence.roles import ENTITY_DELIVERIES, ENTITY_ROLES, Delivery, Role
from pipeline.reasons import Config
from pipeline.support.binder import config_error

E = TypeVar("E", Role, Delivery)
Listener = Callable[["LocalEntity", bool], None]
"""Called with ``(entity, registered)`` after each change; ``registered`` is False on removal."""


@dataclass(frozen=True, kw_only=True)
class LocalEntity:
    """One registered entity: how it takes delivery and, for ``inject``, through what."""

    gid: str
    role: Role
    delivery: Delivery
    groups: frozenset[str] = frozenset()
    injector: Injector | None = None


class LocalEntities:
    """Who lives on this host (R-TOP-1: a gateway consumes for its co-located entities).

    Thread-safe: registration comes from the API/CLI while the consumer loop reads. Reads return
    immutable :class:`LocalEntity` values, so a caller never sees a half-made change. Group
    ``all`` contains every entity (``broadcast.all``); other groups list their members.
    Listeners (e.g. presence) run after the change, outside the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gid: dict[str, LocalEntity] = {}
        self._listeners: list[Listener] = []

    @classmethod
    def from_config(
        cls,
        config: GatewayConfig,
        *,
        callbacks: Mapping[str, Callable[..., object]] | None = None,
        metrics: InjectMetrics | None = None,
    ) -> LocalEntities:
        """A registry holding the config's entities, injectors built (and metered)."""
        registry = cls()
        for entity in config.entities:
            registry.register_config(entity, callbacks=callbacks, metrics=metrics)
        return registry

    def register_config(
        self,
        entity: EntityConfig,
        *,
        callbacks: Mapping[str, Callable[..., object]] | None = None,
        metrics: InjectMetrics | None = None,
    ) -> LocalEntity:
        spec = entity.injector
        return self.register(
            gid=entity.gid,
            role=entity.role,
            delivery=entity.delivery,
            groups=entity.groups,
            injector=None if spec is None else build_injector(spec, callbacks, metrics=metrics),
        )

    def register(
        self,
        *,
        gid: str,
        role: Role,
        delivery: Delivery,
        groups: Iterable[str] = (),
        injector: Injector | None = None,
        replace: bool = False,
    ) -> LocalEntity:
        """Add an entity; ``CONFIG_DUPLICATE_GID`` if the gid is taken and not ``replace``."""
        entity = LocalEntity(
            gid=check_gid(gid),
            role=_enum(Role, ENTITY_ROLES, role, "role"),
            delivery=_enum(Delivery, ENTITY_DELIVERIES, delivery, "delivery"),
            groups=frozenset(check_name(g, what="group") for g in groups),
            injector=injector,
        )
        if entity.delivery is Delivery.INJECT and injector is None:
            raise config_error(
                "injector", None, f"{gid} takes delivery by inject", Config.CONFIG_MISSING_INJECTOR
            )
        if entity.delivery is Delivery.PULL and injector is not None:
            raise config_error("injector", injector, f"{gid} takes delivery by pull: no injector")
        with self._lock:
            if gid in self._by_gid and not replace:
                raise ConfigError(
                    f"entity {gid!r} is already registered on this host",
                    reason=Config.CONFIG_DUPLICATE_GID,
                    context={"key": "gid", "value": gid},
                )
            self._by_gid[gid] = entity
            listeners = tuple(self._listeners)
        for listener in listeners:
            listener(entity, True)
        return entity

    def unregister(self, gid: str) -> LocalEntity | None:
        """Remove an entity; returns it, or None if it was not registered."""
        with self._lock:
            entity = self._by_gid.pop(gid, None)
            listeners = tuple(self._listeners)
        if entity is not None:
            for listener in listeners:
                listener(entity, False)
        return entity

    def get(self, gid: str) -> LocalEntity | None:
        with self._lock:
            return self._by_gid.get(gid)

    def members(self, group: str) -> tuple[LocalEntity, ...]:
        """Members of ``group``, sorted by gid (a broadcast delivers to each exactly once)."""
        with self._lock:
            found = [e for e in self._by_gid.values() if group == ALL_GROUP or group in e.groups]
        return tuple(sorted(found, key=lambda e: e.gid))

    def pull_entities(self) -> tuple[LocalEntity, ...]:
        return self._where(Delivery.PULL)

    def inject_entities(self) -> tuple[LocalEntity, ...]:
        return self._where(Delivery.INJECT)

    def all(self) -> tuple[LocalEntity, ...]:
        with self._lock:
            return tuple(sorted(self._by_gid.values(), key=lambda e: e.gid))

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def __contains__(self, gid: object) -> bool:
        with self._lock:
            return gid in self._by_gid

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_gid)

    def _where(self, delivery: Delivery) -> tuple[LocalEntity, ...]:
        return tuple(e for e in self.all() if e.delivery is delivery)


def _enum(cls: type[E], allowed: tuple[E, ...], value: str, key: str) -> E:
    if value in allowed:
        return cls(value)
    raise config_error(key, value, f"must be one of {', '.join(allowed)}")
