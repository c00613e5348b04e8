"""The composition root's client half: what a one-shot ``fleet send|ask|answer|abandon|poll|spawn``
process builds -- an engine on the host's store, a publisher signing with the host's key, a
client -- and where every builder's Kafka clients and engines come from (:class:`Factories`).

:mod:`pipeline.bootstrap` re-exports all of it. It lives apart so that such a process imports the
store and the envelope, not the gateway's whole graph (runtime, relay, presence follower, pools,
exporter): agents run these commands from their shells, and each call pays its imports
(docs/cli.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.control import spawns
from pipeline.control.client import ControlClient
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.outbound import Publisher
from pipeline.gateway.senders import LocalSenders
from pipeline.kafka.topics import TopicNames
from pipeline.store import make_engine, session_factory

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.envelope import Signer
    from pipeline.gateway.config import GatewayConfig
    from pipeline.gateway.metrics import GatewayMetrics

ClientFactory = Callable[[dict[str, Any]], Any]


def _producer(conf: dict[str, Any]) -> Any:
    # confluent_kafka loads in the processes that make a Kafka client; `fleet send` makes none
    from confluent_kafka import Producer

    return Producer(conf)


def _consumer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(conf)


@dataclass(frozen=True, kw_only=True)
class Factories:
    """Where Kafka clients and engines come from: the real ones unless a test passes its own."""

    producer: ClientFactory = field(default=_producer)
    consumer: ClientFactory = field(default=_consumer)
    engine: Callable[[str], Engine] = field(default=make_engine)


DEFAULT_FACTORIES = Factories()


def local_senders(config: GatewayConfig) -> LocalSenders:
    """Who this host signs for: its configured entities and the workers it spawned (store)."""
    return LocalSenders(
        host=config.host,
        configured=frozenset(e.gid for e in config.entities),
        spawned=spawns.is_local_worker,
    )


def build_client(
    config: GatewayConfig,
    *,
    signer: Signer,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
    metrics: GatewayMetrics | None = None,
) -> GatewayClient:
    """A client for local entities of ``config.host`` (CLI `fleet send`/`poll`, MCP, libraries)."""
    engine = engine or factories.engine(config.store_url)
    topics = TopicNames(prefix=config.topic_prefix)
    return GatewayClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        inject_deadline_s=config.inject_deadline_s,
        local_senders=local_senders(config),
        metrics=metrics,
    )


def build_control_client(
    config: GatewayConfig,
    *,
    signer: Signer,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> ControlClient:
    """The requester's control-plane API for local entities (``fleet spawn``, the MCP face)."""
    engine = engine or factories.engine(config.store_url)
    topics = TopicNames(prefix=config.topic_prefix)
    return ControlClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        deadline_s=config.spawn_deadline_s,
        local_senders=local_senders(config),
    )
