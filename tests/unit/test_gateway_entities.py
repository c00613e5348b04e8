"""LocalEntities: the host's registry of entities, changed at runtime and read concurrently."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from pipeline.errors import ConfigError
from pipeline.gateway.entities import LocalEntities, LocalEntity
from pipeline.gateway.injectors import CallbackInjector, CommandInjector, MeteredInjector
from pipeline.gateway.injectors.metrics import InjectMetrics
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role


def noop(**_: object) -> None:
    return None


def add(reg: LocalEntities, gid: str, *groups: str, pull: bool = False) -> LocalEntity:
    if pull:
        return reg.register(gid=gid, role=Role.MAIN, delivery=Delivery.PULL, groups=groups)
    return reg.register(
        gid=gid,
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        groups=groups,
        injector=CallbackInjector(noop),
    )


def test_register_get_unregister() -> None:
    reg = LocalEntities()
    entity = add(reg, "w1", "builders")
    assert reg.get("w1") == entity and "w1" in reg and len(reg) == 1
    assert entity.groups == frozenset({"builders"})
    assert reg.unregister("w1") == entity
    assert reg.get("w1") is None and reg.unregister("w1") is None and len(reg) == 0


def test_members_pull_and_inject_views() -> None:
    reg = LocalEntities()
    add(reg, "w2", "builders")
    add(reg, "w1", "builders", "reviewers")
    add(reg, "m", "reviewers", pull=True)
    assert [e.gid for e in reg.members("builders")] == ["w1", "w2"]
    assert [e.gid for e in reg.members("reviewers")] == ["m", "w1"]
    assert [e.gid for e in reg.members("all")] == ["m", "w1", "w2"]  # broadcast.all: everyone
    assert reg.members("nobody") == ()
    assert [e.gid for e in reg.pull_entities()] == ["m"]
    assert [e.gid for e in reg.inject_entities()] == ["w1", "w2"]


def test_duplicate_gid_refused_unless_replace() -> None:
    reg = LocalEntities()
    add(reg, "w1")
    with pytest.raises(ConfigError) as info:
        add(reg, "w1")
    assert info.value.reason == "CONFIG_DUPLICATE_GID"
    replaced = reg.register(gid="w1", role=Role.MAIN, delivery=Delivery.PULL, replace=True)
    assert reg.get("w1") == replaced and replaced.delivery is Delivery.PULL


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"gid": "bad gid", "delivery": Delivery.PULL}, "INVALID_NAME"),
        ({"gid": "w", "delivery": Delivery.PULL, "groups": ["no!"]}, "INVALID_NAME"),
        ({"gid": "w", "delivery": Delivery.INJECT}, "CONFIG_MISSING_INJECTOR"),
        ({"gid": "w", "delivery": "push"}, "CONFIG_INVALID"),
        (
            {"gid": "w", "delivery": Delivery.PULL, "injector": CallbackInjector(noop)},
            "CONFIG_INVALID",
        ),
    ],
)
def test_invalid_registrations(kwargs: dict[str, object], reason: str) -> None:
    reg = LocalEntities()
    with pytest.raises(ConfigError) as info:
        reg.register(role=Role.WORKER, **kwargs)  # type: ignore[arg-type]
    assert info.value.reason == reason
    assert len(reg) == 0


def test_listeners_hear_every_change() -> None:
    reg = LocalEntities()
    heard: list[tuple[str, bool]] = []
    reg.add_listener(lambda entity, registered: heard.append((entity.gid, registered)))
    add(reg, "w1")
    reg.unregister("w1")
    reg.unregister("w1")  # not there: no event
    assert heard == [("w1", True), ("w1", False)]


def test_concurrent_registration_loses_nothing() -> None:
    reg = LocalEntities()
    barrier = threading.Barrier(8)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(200):
            add(reg, f"w{n}-{i}", "g")
            if i % 2:
                reg.unregister(f"w{n}-{i}")
            reg.members("g")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reg) == 8 * 100
    assert len(reg.members("g")) == 800


def test_from_config_builds_metered_injectors() -> None:
    calls: list[str] = []
    config = GatewayConfig(
        host="A",
        entities=(
            EntityConfig(gid="m", role=Role.MAIN, delivery=Delivery.PULL),
            EntityConfig(
                gid="w1",
                role=Role.WORKER,
                delivery=Delivery.INJECT,
                injector=InjectorSpec(type="callback", callback="w1"),
            ),
            EntityConfig(
                gid="w2",
                role=Role.WORKER,
                delivery=Delivery.INJECT,
                injector=InjectorSpec(type="command", command=("true",)),
            ),
        ),
    )
    metrics = InjectMetrics(CollectorRegistry())
    reg = LocalEntities.from_config(
        config, callbacks={"w1": lambda **kw: calls.append(kw["msg_id"])}, metrics=metrics
    )
    w1, w2 = reg.get("w1"), reg.get("w2")
    assert w1 is not None and isinstance(w1.injector, MeteredInjector)
    assert w2 is not None and isinstance(w2.injector, MeteredInjector)
    assert isinstance(w2.injector.inner, CommandInjector)
    w1.injector.inject(gid="w1", msg_id="m-1", kind="SEND", sender="x", body=b"hi")
    assert calls == ["m-1"]
    assert reg.get("m") is not None and reg.get("m").injector is None  # type: ignore[union-attr]
