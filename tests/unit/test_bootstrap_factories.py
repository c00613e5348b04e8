"""bootstrap takes client and engine factories: a test passes its own, production the real ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.bootstrap.client import Factories
from pipeline.bootstrap.gateway import build_gateway
from pipeline.bootstrap.reporters import build_relay
from pipeline.envelope import Signer, TrustStore
from pipeline.errors import BrokerError, ConfigError
from pipeline.hooks import NO_HOOKS, hooks_from_fault
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.observability import KafkaOffsetReader
from pipeline.outbox import write
from pipeline.outbox.sent import is_sent
from pipeline.presence.roles import Delivery, Role
from pipeline.store import make_engine, session_factory


class ConfirmingProducer:
    """Confirms every record at once (a broker that always accepts)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.produced: list[tuple[str, bytes | None]] = []
        self._reports: list[Any] = []

    def produce(
        self, topic: str, *, value: bytes | None, key: bytes | None, headers: Any, on_delivery: Any
    ) -> None:
        self.produced.append((topic, value))
        self._reports.append(on_delivery)

    def poll(self, _timeout: float) -> int:
        reports, self._reports = self._reports, []
        for report in reports:
            report(None, None)
        return len(reports)

    def flush(self, _timeout: float = 0) -> int:
        self.poll(0)
        return 0


def test_build_relay_uses_the_given_producer_and_engine_factories(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    made: list[ConfirmingProducer] = []
    engines: list[str] = []

    def producer(conf: dict[str, Any]) -> ConfirmingProducer:
        made.append(ConfirmingProducer(conf))
        return made[-1]

    def engine(u: str) -> Any:
        engines.append(u)
        return make_engine(u)

    relay = build_relay(
        url, bootstrap="nowhere:1", factories=Factories(producer=producer, engine=engine)
    )
    with session_factory(relay.engine).begin() as s:
        write(s, topic="t", key=b"k", value=b"v", branch_key="b")
    assert relay.drain() == 1
    relay.close()
    assert engines == [url] and made[0].produced == [("t", b"v")]
    assert made[0].conf["bootstrap.servers"] == "nowhere:1"
    with relay.engine.connect() as conn:
        assert conn.execute(select(is_sent())).scalar_one()  # under its branch's watermark
    relay.engine.dispose()


def test_fault_hooks_are_parsed_at_the_edge_only() -> None:
    assert hooks_from_fault(None) is NO_HOOKS
    assert hooks_from_fault("crash_after_commit").fault_after_commit is not None


class StubClient:
    """Any Kafka client: every method is a no-op returning None (construction only)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf

    def __getattr__(self, name: str) -> Any:
        return lambda *_a, **_k: None


def build_stubbed(config: GatewayConfig) -> Any:
    """``build_gateway`` as production calls it, every Kafka client a :class:`StubClient` and
    no topology applied: the gateway's parts, nothing started."""
    factories = Factories(consumer=StubClient, producer=StubClient, admin=StubClient)
    return build_gateway(
        config, signer=Signer.generate(config.host), trust=TrustStore(), factories=factories,
        apply_topics=False,
    )  # fmt: skip


def _no_direct_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client constructed anywhere but through the factories fails the test."""
    import confluent_kafka
    import confluent_kafka.admin

    def refuse(conf: dict[str, Any]) -> Any:
        raise AssertionError(f"a Kafka client built outside Factories: {conf}")

    for module, name in (
        (confluent_kafka, "Consumer"),
        (confluent_kafka, "Producer"),
        (confluent_kafka.admin, "AdminClient"),
    ):
        monkeypatch.setattr(module, name, refuse)


def test_build_gateway_makes_every_kafka_client_through_the_factories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_direct_clients(monkeypatch)
    made: dict[str, list[dict[str, Any]]] = {"consumer": [], "producer": [], "admin": []}

    def factory(kind: str) -> Any:
        def make(conf: dict[str, Any]) -> StubClient:
            made[kind].append(conf)
            return StubClient(conf)

        return make

    config = GatewayConfig(
        host="h1",
        bootstrap="nowhere:1",
        store_url=f"sqlite:///{tmp_path / 'h1.sqlite'}",
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
    )
    signer = Signer.generate("h1")
    trust = TrustStore()
    factories = Factories(
        consumer=factory("consumer"), producer=factory("producer"), admin=factory("admin")
    )
    # apply_topics=False: a stub admin cannot answer the topology check; the admin route is
    # checked through the lag reader and ensure_pool_topic below
    parts = build_gateway(
        config, signer=signer, trust=trust, factories=factories, apply_topics=False
    )
    groups = sorted(c["group.id"] for c in made["consumer"])
    assert groups[0] == TopicNames().gateway_group("h1") and groups[1].startswith(
        "fleet.roster-reader."
    )
    assert len(groups) == 2  # the inbox runtime and the roster follower: nothing else
    assert made["producer"] and {c["bootstrap.servers"] for c in made["producer"]} == {"nowhere:1"}
    parts.relay.close()
    parts.engine.dispose()


def test_the_lag_reader_and_the_pool_topology_take_the_admin_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_direct_clients(monkeypatch)
    admins: list[dict[str, Any]] = []

    class Listing(StubClient):
        def list_topics(self, *_a: Any, **_k: Any) -> Any:
            raise RuntimeError("stub broker unreachable")

    def admin(conf: dict[str, Any]) -> Listing:
        admins.append(conf)
        return Listing(conf)

    KafkaOffsetReader("nowhere:1", admin_factory=admin, consumer_factory=StubClient)
    with pytest.raises(BrokerError):
        ensure_pool_topic("nowhere:1", TopicNames(), "p", partitions=2, admin_factory=admin)
    assert [c["bootstrap.servers"] for c in admins] == ["nowhere:1", "nowhere:1"]


@pytest.mark.parametrize(("socket_ms", "relay_ms"), [(4.0, 6.0), (0, 0), (1.5, 20)])
def test_the_spacings_are_read_from_the_config_and_bounded(
    tmp_path: Path, socket_ms: float, relay_ms: float
) -> None:
    """``socket_spacing_ms`` / ``relay_spacing_ms`` reach the socket and the relay the gateway
    runs (docs/configuration.md); 0 switches each off; a negative or seconds-sized one is a
    CONFIG_INVALID naming the key."""
    config = GatewayConfig(
        host="h1",
        bootstrap="nowhere:1",
        store_url=f"sqlite:///{tmp_path / 'h1.sqlite'}",
        socket_spacing_ms=socket_ms,
        relay_spacing_ms=relay_ms,
    )
    parts = build_stubbed(config)
    try:
        assert parts.socket is not None and parts.socket.spacing_s == socket_ms / 1000
        assert parts.relay._pacing.spacing_s == relay_ms / 1000
    finally:
        parts.relay.close()
        parts.engine.dispose()
    for key, bad in (
        ("socket_spacing_ms", -1),
        ("relay_spacing_ms", 250),
        ("socket_spacing_ms", True),
    ):
        with pytest.raises(ConfigError, match=key) as refused:
            GatewayConfig(host="h1", **{key: bad})
        assert refused.value.reason == "CONFIG_INVALID"
