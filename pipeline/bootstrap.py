"""The composition root: the one place concrete objects are built and wired.

Entry points (CLI, demo, tests) call :func:`build_gateway` / :func:`build_client`; tests pass
fakes through the same parameters. Nothing here reads the environment or files beyond what the
frozen :class:`GatewayConfig` names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Consumer, Producer
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.control import ControlClient, SpawnDeadlines
from pipeline.envelope import BoundedSeenSet, Signer, TrustStore, Verifier
from pipeline.errors import ConfigError
from pipeline.failures.metrics import FailureMetrics
from pipeline.failures.offsets import assign_from_committed
from pipeline.failures.reporter import FailedReporter
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.config import Delivery, GatewayConfig
from pipeline.gateway.conversations import Conversations
from pipeline.gateway.deadletters import OutboxDeadLetterSink
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.failed_sink import EnvelopeFailedSink
from pipeline.gateway.held import HeldStore
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import InjectMetrics, Injector, build_injector
from pipeline.gateway.maintenance import Maintenance
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.gateway.nudge import Nudger
from pipeline.gateway.outbound import Publisher
from pipeline.gateway.roster_cache import RosterEntry
from pipeline.gateway.service import Gateway, Supervised
from pipeline.kafka.settings import OffsetReset, consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.outbox import Relay
from pipeline.presence import PresencePublisher, RosterFollower, RosterView
from pipeline.presence.model import SpawnProfile
from pipeline.presence.publisher import ProducerLike
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.store import make_engine, read_sessions, session_factory

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)


@dataclass
class GatewayParts:
    """Everything :func:`build_gateway` made, for tests and the demo to reach into."""

    gateway: Gateway
    client: GatewayClient
    engine: Engine
    runtime: ConsumerRuntime
    relay: Relay
    roster: RosterView
    injections: InjectionQueue
    maintenance: Maintenance
    nudger: Nudger
    registry: CollectorRegistry
    metrics: GatewayMetrics


def build_client(
    config: GatewayConfig,
    *,
    signer: Signer,
    engine: Engine | None = None,
    metrics: GatewayMetrics | None = None,
) -> GatewayClient:
    """A client for local entities of ``config.host`` (CLI `fleet send`/`poll`, MCP, libraries)."""
    engine = engine or make_engine(config.store_url)
    topics = TopicNames(prefix=config.topic_prefix)
    return GatewayClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        inject_deadline_s=config.inject_deadline_s,
        local_senders=frozenset(e.gid for e in config.entities),
        metrics=metrics,
    )


def build_control_client(
    config: GatewayConfig, *, signer: Signer, engine: Engine | None = None
) -> ControlClient:
    """The requester's control-plane API for local entities (``fleet spawn``, the MCP face)."""
    engine = engine or make_engine(config.store_url)
    topics = TopicNames(prefix=config.topic_prefix)
    return ControlClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        deadline_s=config.spawn_deadline_s,
        local_senders=frozenset(e.gid for e in config.entities),
    )


def _build_nudger(
    config: GatewayConfig,
    callbacks: Mapping[str, Callable[..., Any]] | None,
    reads: Any,
    conversations: Conversations,
    metrics: GatewayMetrics,
    publisher: Publisher,
) -> Nudger:
    """Hold and nudge: one target per pull entity with ``[entities.nudge]``."""
    targets: dict[str, Injector] = {
        e.gid: build_injector(e.nudge, callbacks) for e in config.entities if e.nudge is not None
    }
    return Nudger(
        targets=targets,
        reads=reads,
        conversations=conversations,
        metrics=metrics,
        gateway_id=publisher.gateway_id,
        initial_s=config.nudge_initial_s,
        max_s=config.nudge_max_s,
    )


def build_gateway(
    config: GatewayConfig,
    *,
    signer: Signer,
    trust: TrustStore,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    registry: CollectorRegistry | None = None,
    apply_topics: bool = True,
    relay_poll_s: float = 0.002,
    maintenance_interval_s: float | None = None,
    fault_after_commit: Callable[[int], None] | None = None,
) -> GatewayParts:
    """Build one host's gateway: inbox runtime, relay, presence, roster, injectors, ticker."""
    host = config.host
    topics = TopicNames(prefix=config.topic_prefix)
    registry = registry or CollectorRegistry()
    if apply_topics:
        apply_topology(config.bootstrap, TopologySpec(hosts=(host,), topics=topics))
    engine = make_engine(config.store_url)
    sessions = session_factory(engine)
    reads = read_sessions(engine)
    metrics = GatewayMetrics(registry)

    roster = RosterView.build(trust=trust, topics=topics, skew_s=config.clock_skew_s)
    follower = RosterFollower(bootstrap=config.bootstrap, view=roster, topics=topics)
    presence = PresencePublisher(
        producer=cast("ProducerLike", Producer(producer_config(config.bootstrap))),
        signer=signer,
        topics=topics,
        interval_s=config.presence_interval_s,
        ttl_s=config.presence_ttl_s,
        profiles=[SpawnProfile(name=p.name, description=p.description) for p in config.profiles],
    )
    seen = BoundedSeenSet()
    verifier = Verifier(
        host=host,
        trust=trust,
        presence=roster,
        seen=seen,
        topics=topics,
        max_ttl_s=config.max_ttl_s,
        skew_s=config.clock_skew_s,
    )
    entities = LocalEntities.from_config(
        config, callbacks=callbacks, metrics=InjectMetrics(registry)
    )
    publisher = Publisher(host=host, signer=signer, topics=topics)
    injections = InjectionQueue(
        entities=entities, sessions=sessions, publisher=publisher, metrics=metrics
    )
    conversations = Conversations(sessions)
    handler = InboxHandler(
        host=host,
        verifier=verifier,
        entities=entities,
        publisher=publisher,
        conversations=conversations,
        injections=injections,
        reads=reads,
        metrics=metrics,
        seen=seen,
        max_held_per_recipient=config.max_held_per_recipient,
    )
    group = topics.gateway_group(host)
    dead_letters = OutboxDeadLetterSink(topics=topics, gateway=host, group=group)
    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=config.bootstrap,
            group_id=group,
            topics=(topics.inbox(host),),
            instance_id=host,
            ordered=False,
        ),
        handler=handler,
        sessions=sessions,
        dead_letters=dead_letters,
        metrics=RuntimeMetrics(registry),
        fault_after_commit=fault_after_commit,
    )
    relay = Relay(
        engine=engine, bootstrap=config.bootstrap, registry=registry, idle_wait_s=relay_poll_s
    )
    maintenance = Maintenance(
        sessions=sessions,
        held=HeldStore(sessions),
        conversations=conversations,
        dead_letters=dead_letters,
        publisher=publisher,
        metrics=metrics,
        max_ttl_s=config.max_ttl_s,
        roster_entries=lambda: [
            RosterEntry(
                e.gid, e.host, e.role.value, e.delivery.value, tuple(e.groups), e.ts_ms + e.ttl_ms
            )
            for e in roster.entries()
        ],
        entities=entities,
        injections=injections,
    )
    nudger = _build_nudger(config, callbacks, reads, conversations, metrics, publisher)
    client = build_client(config, signer=signer, engine=engine, metrics=metrics)
    interval = maintenance_interval_s or config.sweep_interval_s
    spawn_deadlines = SpawnDeadlines(sessions=sessions, publisher=publisher, ttl_s=config.max_ttl_s)

    def run_runtime(stop: Any) -> None:
        follower.catch_up()
        maintenance.refresh_roster()
        runtime.run(stop)

    def run_follower(stop: Any) -> None:
        follower.start()
        stop.wait()

    def run_presence(stop: Any) -> None:
        for e in config.entities:
            presence.register(e.gid, role=e.role, delivery=e.delivery, groups=e.groups)
        presence.start()
        stop.wait()

    def run_maintenance(stop: Any) -> None:
        while not stop.wait(min(interval, 0.5)):
            maintenance.tick()
            try:
                spawn_deadlines.tick()
            except Exception:
                log.exception("maintenance duty spawn_deadlines failed")

    gateway = Gateway(
        host=host,
        loops=[
            Supervised("presence", run_presence),
            Supervised("roster", run_follower),
            Supervised("inbox", run_runtime, restart=False),
            Supervised("relay", relay.run_forever),
            Supervised("maintenance", run_maintenance),
            *([Supervised("nudge", nudger.run)] if nudger.targets else []),
        ],
    )
    gateway.on_stop.extend(
        [injections.stop, presence.stop, follower.stop, relay.close, engine.dispose]
    )
    return GatewayParts(
        gateway=gateway,
        client=client,
        engine=engine,
        runtime=runtime,
        relay=relay,
        roster=roster,
        injections=injections,
        maintenance=maintenance,
        nudger=nudger,
        registry=registry,
        metrics=metrics,
    )


def build_failed_reporter(
    config: GatewayConfig,
    *,
    signer: Signer,
    trust: TrustStore,
    group: str | None = None,
    dlq_topic: str | None = None,
    registry: CollectorRegistry | None = None,
) -> FailedReporter:
    """The DLQ's FAILED reporter running as ``config.host`` (seed 000 §10.1).

    Its FAILEDs are signed by this host and written to this host's outbox in the transaction of
    the reporter's dedupe row; this host's gateway relay ships them (the relay drains the whole
    store). Close ``reporter.consumer`` and dispose ``reporter.engine`` when done.
    """
    topics = TopicNames(prefix=config.topic_prefix)
    group_id = group or f"{config.topic_prefix}dlq-reporter"
    # a DLQ that retention trimmed before we reported it must fail loudly, not skip
    consumer = Consumer(consumer_config(config.bootstrap, group_id, offset_reset=OffsetReset.ERROR))
    consumer.subscribe(
        [dlq_topic or topics.dlq],
        on_assign=lambda c, parts: assign_from_committed(c, parts, group_id),
    )
    sink = EnvelopeFailedSink(
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        trust=trust,
        ttl_s=config.max_ttl_s,
    )
    return FailedReporter(
        consumer=consumer,
        engine=make_engine(config.store_url),
        sink=sink,
        metrics=FailureMetrics(registry or CollectorRegistry()),
        group=group_id,
    )


def build_mcp_server(config: GatewayConfig, *, signer: Signer, gid: str) -> MCPServer:
    """The stdio MCP server of main ``gid`` (``fleet mcp --as``): a pull entity of this host."""
    from pipeline.mcp import build_server

    entity = next((e for e in config.entities if e.gid == gid), None)
    if entity is None or entity.delivery is not Delivery.PULL:
        what = "not an entity" if entity is None else "an inject entity, not a pull entity"
        raise ConfigError(
            f"--as {gid}: {what} of host {config.host}; a main over MCP is a local pull entity",
            reason="CONFIG_INVALID",
            context={"key": "as", "value": gid},
        )
    engine = make_engine(config.store_url)
    return build_server(
        build_client(config, signer=signer, engine=engine),
        gid=gid,
        control=build_control_client(config, signer=signer, engine=engine),
    )
