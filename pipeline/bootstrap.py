"""The composition root: the one place concrete objects are built and wired.

Entry points (CLI, demo, tests) call :func:`build_gateway`, :func:`build_client`,
:func:`build_relay`, :func:`build_failed_reporter` and :func:`build_exporter`; they only parse
arguments. Kafka clients and engines come from a :class:`Factories` (tests pass their own), test
hooks from one :class:`~pipeline.hooks.Hooks`. Nothing here reads the environment or files beyond
what the frozen configs name.

The client half (:func:`build_client`, :func:`build_control_client`, :class:`Factories`) lives in
:mod:`pipeline.bootstrap_client` and is re-exported here: a one-shot ``fleet send`` imports that
module alone, not the graph this one wires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.bootstrap_client import (  # the client half, re-exported (see the docstring)
    DEFAULT_FACTORIES,
    Factories,
    build_client,
    build_control_client,
)
from pipeline.control import SPAWN, STOP
from pipeline.control.handler import SpawnHandler
from pipeline.control.launcher import Launcher, worker_injector
from pipeline.control.metrics import LifecycleMetrics
from pipeline.control.reaper import Reaper
from pipeline.control.stop_handler import StopHandler
from pipeline.effects import IdempotencyMetrics, IdempotencyStore, KeyClass
from pipeline.envelope import BoundedSeenSet, Signer, TrustStore, Verifier
from pipeline.envelope.model import now_ms
from pipeline.errors import ConfigError
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.metrics import FailureMetrics
from pipeline.failures.offsets import assign_from_committed
from pipeline.failures.quarantine import QuarantineStore
from pipeline.failures.reporter import FailedReporter
from pipeline.failures.runtime_ports import FailurePorts
from pipeline.failures.sinks import TopicFailedSink
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.config import GatewayConfig, ProfileConfig
from pipeline.gateway.conversations import Conversations
from pipeline.gateway.deadletters import OutboxDeadLetterSink, dead_letter_held, undrained
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
from pipeline.gateway.relay_failed import RelayFailedSink
from pipeline.gateway.roster_cache import RosterEntry, RosterState
from pipeline.gateway.service import Gateway, Supervised
from pipeline.gateway.tracking import FORWARD
from pipeline.hooks import NO_HOOKS, Hooks
from pipeline.kafka.errors import wait_out
from pipeline.kafka.settings import (
    OffsetReset,
    consumer_config,
    pool_consumer_overrides,
    producer_config,
)
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology, ensure_pool_topic
from pipeline.observability import ExporterConfig, KafkaOffsetReader
from pipeline.observability import build_exporter as start_exporter
from pipeline.observability.exporter import Exporter
from pipeline.outbox import Relay
from pipeline.pool import PoolConfig, PoolHandler
from pipeline.pool.claims import StepClaims
from pipeline.pool.heartbeat import Heartbeat as PoolHeartbeat
from pipeline.pool.metrics import PoolMetrics
from pipeline.pool.steps import StepFn
from pipeline.presence import PresencePublisher, RosterFollower, RosterView
from pipeline.presence.metrics import PresenceMetrics
from pipeline.presence.model import Delivery, Gone, Role, SpawnProfile
from pipeline.presence.publisher import ProducerLike
from pipeline.reasons import Config, Lifecycle
from pipeline.retention.metrics import RetentionMetrics
from pipeline.retention.purger import Purger
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.inflight import Dispatcher, InflightConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.routing import ByTopic
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


def _secured(factories: Factories, config: GatewayConfig, *, check: bool) -> Factories:
    """``factories`` with the ``[kafka]`` login on every client; with ``check``, a refused login
    or handshake stops the start at once with its reason (docs/security.md), where waiting for a
    broker that is still starting would go on for minutes."""
    factories = factories.secured(config.kafka)
    if check:
        factories.check_access(config.bootstrap)
    return factories


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
    factories: Factories = DEFAULT_FACTORIES,
    hooks: Hooks = NO_HOOKS,
) -> GatewayParts:
    """Build one host's gateway: inbox runtime, relay, presence, roster, injectors, ticker."""
    # every client below carries the [kafka] login; a refused one stops the start here
    host, factories = config.host, _secured(factories, config, check=apply_topics)
    topics = TopicNames(prefix=config.topic_prefix)
    registry = registry or CollectorRegistry()
    if apply_topics:  # a broker still starting, or a leader not elected yet, is waited out
        wait_out(
            lambda: apply_topology(
                config.bootstrap,
                TopologySpec(
                    hosts=(host,),
                    topics=topics,
                    inbox_retention_ms=config.retention.inbox_retention_ms,
                ),
                admin_factory=factories.admin,
            ),
            what=f"gateway {host}: topology",
            deadline_s=120.0,
            log=log,
        )
    engine = factories.engine(config.store_url)
    sessions = session_factory(engine)
    reads = read_sessions(engine)
    metrics = GatewayMetrics(registry)

    presence_metrics = PresenceMetrics(registry)
    roster = RosterView.build(trust=trust, topics=topics, skew_s=config.clock_skew_s)
    follower = RosterFollower(
        bootstrap=config.bootstrap,
        view=roster,
        topics=topics,
        metrics=presence_metrics,
        consumer_factory=factories.consumer,
    )
    presence = PresencePublisher(
        metrics=presence_metrics,
        producer=cast("ProducerLike", factories.producer(producer_config(config.bootstrap))),
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
    # one set of inject instruments for the configured and the spawned workers
    entities = LocalEntities.from_config(
        config, callbacks=callbacks, metrics=(inject_metrics := InjectMetrics(registry))
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
        lifecycle=(lifecycle := LifecycleMetrics(registry)),
        tracked=(tracked := (FORWARD, SPAWN, STOP)),
    )
    group = topics.gateway_group(host)
    dead_letters = OutboxDeadLetterSink(topics=topics, gateway=host, group=group)
    spawn_handler = _control_plane(
        config,
        verifier,
        publisher,
        sessions,
        entities,
        presence,
        callbacks,
        inject_metrics,
        lifecycle,
        dead_letters,
    )
    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=config.bootstrap,
            group_id=group,
            topics=(topics.inbox(host), topics.control(host)),
            instance_id=host,
            ordered=False,
        ),
        handler=ByTopic({topics.control(host): spawn_handler}, default=handler),
        sessions=sessions,
        dead_letters=dead_letters,
        metrics=RuntimeMetrics(registry),
        consumer_factory=factories.consumer,
        fault_after_commit=hooks.fault_after_commit,
    )
    relay = Relay(
        engine=engine,
        bootstrap=config.bootstrap,
        registry=registry,
        idle_wait_s=relay_poll_s,
        terminal_sink=RelayFailedSink(publisher=publisher, ttl_s=config.max_ttl_s),
        producer_factory=factories.producer,
    )
    maintenance = Maintenance(
        sessions=sessions,
        held=HeldStore(sessions),
        conversations=conversations,
        dead_letters=dead_letters,
        publisher=publisher,
        metrics=metrics,
        max_ttl_s=config.max_ttl_s,
        roster_entries=lambda: (
            [
                RosterEntry(
                    e.gid,
                    e.host,
                    e.role.value,
                    e.delivery.value,
                    tuple(e.groups),
                    e.ts_ms + e.ttl_ms,
                )
                for e in roster.entries(include_stale=True)
            ]
            + [
                RosterEntry(e.gid, e.host, e.role.value, e.delivery.value, (), 0, str(e.gone))
                for e in roster.departures()
            ]
        ),
        roster_state=lambda: RosterState(
            roster.freshness().horizon_ms,
            roster.freshness().stale,
            roster.freshness().why,
            now_ms(),
        ),
        entities=entities,
        injections=injections,
        tracked=tracked,
        purger=Purger(engine=engine, policy=config.retention, metrics=RetentionMetrics(registry)),
    )
    nudger = _build_nudger(config, callbacks, reads, conversations, metrics, publisher)
    client = build_client(
        config, signer=signer, engine=engine, factories=factories, metrics=metrics
    )
    interval = maintenance_interval_s or config.sweep_interval_s

    def run_runtime(stop: Any) -> None:
        # verification step 2 needs the bindings: the inbox starts once the roster has caught
        # up (the roster loop waits out transient broker errors meanwhile)
        while not follower.caught_up.wait(0.2):
            if stop.is_set():
                return
        spawn_handler.relive()
        maintenance.refresh_roster()
        runtime.run(stop)

    def run_presence(stop: Any) -> None:
        for e in config.entities:
            presence.register(e.gid, role=e.role, delivery=e.delivery, groups=e.groups)
        presence.start()
        stop.wait()

    def run_maintenance(stop: Any) -> None:
        while not stop.wait(min(interval, 0.5)):
            maintenance.tick(stop)  # a stop ends a purge pass between two batches
            try:
                spawn_handler.sweep()  # reap workers whose process died (§8 step 7)
            except Exception:
                log.exception("maintenance duty spawn_handler.sweep failed")

    gateway = Gateway(
        host=host,
        loops=[
            Supervised("presence", run_presence),
            Supervised("roster", follower.run),
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


def _control_plane(
    config: GatewayConfig,
    verifier: Verifier,
    publisher: Publisher,
    sessions: Any,
    entities: LocalEntities,
    presence: PresencePublisher,
    callbacks: Mapping[str, Callable[..., Any]] | None,
    inject_metrics: InjectMetrics,
    lifecycle: LifecycleMetrics,
    dead_letters: OutboxDeadLetterSink,
) -> SpawnHandler:
    """The control topic's handler (a launched worker becomes a local inject entity; a STOP or
    a death takes it out again: tombstone + reaped)."""

    def on_live(gid: str, profile: ProfileConfig, values: Mapping[str, str]) -> None:
        spec = worker_injector(profile.injector, values)
        entities.register(
            gid=gid,
            role=Role.WORKER,
            delivery=Delivery.INJECT,
            groups=profile.groups,
            injector=build_injector(spec, callbacks, metrics=inject_metrics),
            replace=True,
        )
        presence.register(gid, role="worker", delivery="inject", groups=profile.groups)

    def forget(gid: str, gone: Gone) -> None:
        entities.unregister(gid)
        # the departure (why) and the tombstone: gone from every roster within a heartbeat
        presence.unregister(gid, gone=gone)

    def drop_held(session: Any, gid: str) -> int:
        return dead_letter_held(
            session,
            dead_letters,
            undrained(session, gid),
            reason=Lifecycle.RECIPIENT_GONE,
            error="held for {recipient}, which was stopped or reaped",
        )

    profiles = {p.name: p for p in config.profiles}
    launcher = Launcher()
    handler: SpawnHandler | None = None

    def values(row: Any, profile: ProfileConfig) -> Mapping[str, str]:
        assert handler is not None
        return handler.values(row.spawn_id, profile, parent=row.parent, job=row.job)

    reaper = Reaper(
        sessions=sessions,
        profiles=profiles,
        launcher=launcher,
        values=values,
        forget=forget,
        drop_held=drop_held,
        metrics=lifecycle,
    )
    handler = SpawnHandler(
        host=config.host,
        verifier=verifier,
        publisher=publisher,
        sessions=sessions,
        profiles=profiles,
        launcher=launcher,
        on_live=on_live,
        count=lifecycle.count,
        stops=StopHandler(publisher=publisher, sessions=sessions, reaper=reaper, metrics=lifecycle),
    )
    return handler


def build_failed_reporter(
    config: GatewayConfig,
    *,
    signer: Signer,
    trust: TrustStore,
    group: str | None = None,
    dlq_topic: str | None = None,
    registry: CollectorRegistry | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> FailedReporter:
    """The DLQ's FAILED reporter running as ``config.host`` (seed 000 §10.1).

    Its FAILEDs are signed by this host and written to this host's outbox in the transaction of
    the reporter's dedupe row; this host's gateway relay ships them (the relay drains the whole
    store). Close ``reporter.consumer`` and dispose ``reporter.engine`` when done.
    """
    topics, factories = TopicNames(prefix=config.topic_prefix), factories.secured(config.kafka)
    group_id = group or f"{config.topic_prefix}dlq-reporter"
    # a DLQ that retention trimmed before we reported it must fail loudly, not skip
    consumer = factories.consumer(
        consumer_config(config.bootstrap, group_id, offset_reset=OffsetReset.ERROR)
    )
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
        engine=factories.engine(config.store_url),
        sink=sink,
        metrics=FailureMetrics(registry or CollectorRegistry()),
        group=group_id,
    )


def build_plain_reporter(
    *,
    bootstrap: str,
    store_url: str,
    sink_topic: str,
    prefix: str,
    dlq_topic: str | None = None,
    group: str | None = None,
    registry: CollectorRegistry | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> FailedReporter:
    """The DLQ reporter with the unsigned plain-record sink (tests and local runs)."""
    group_id = group or f"{prefix}dlq-reporter"
    # a DLQ that retention trimmed before we reported it must fail loudly, not skip
    consumer = factories.consumer(
        consumer_config(bootstrap, group_id, offset_reset=OffsetReset.ERROR)
    )
    consumer.subscribe(
        [dlq_topic or TopicNames(prefix=prefix).dlq],
        on_assign=lambda c, parts: assign_from_committed(c, parts, group_id),
    )
    return FailedReporter(
        consumer=consumer,
        engine=factories.engine(store_url),
        sink=TopicFailedSink(factories.producer(producer_config(bootstrap)), sink_topic),
        metrics=FailureMetrics(registry or CollectorRegistry()),
        group=group_id,
    )


def build_relay(
    store_url: str,
    *,
    bootstrap: str,
    tenant: str | None = None,
    batch_size: int = 500,
    delivery_timeout_s: float = 10.0,
    registry: CollectorRegistry | None = None,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> Relay:
    """The outbox relay as its own process (``fleet relay run``, ``fleet dlq report --relay``).

    Dispose ``relay.engine`` when done. Rows it makes FAILED are not reported to a sender (no
    signer here): a gateway's own relay does that.
    """
    return Relay(
        engine=engine or factories.engine(store_url),
        bootstrap=bootstrap,
        tenant=tenant,
        batch_size=batch_size,
        delivery_timeout_s=delivery_timeout_s,
        registry=registry,
        producer_factory=factories.producer,
    )


def build_exporter(
    config: ExporterConfig,
    *,
    store_urls: list[str] | None = None,
    reader: KafkaOffsetReader | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> Exporter:
    """``fleet exporter``: lag sampler and, with ``store_urls``, the store gauges; started."""
    from pipeline.observability.store_gauges import SqlStoreGauges

    store = SqlStoreGauges.from_urls(store_urls) if store_urls else None
    reader = reader or KafkaOffsetReader(
        config.bootstrap, admin_factory=factories.admin, consumer_factory=factories.consumer
    )
    return start_exporter(config, reader=reader, store=store)


@dataclass
class PoolMember:
    """Everything :func:`build_pool_member` made: ``run(stop)``, then dispose ``engine``."""

    runtime: ConsumerRuntime
    handler: PoolHandler
    engine: Engine
    registry: CollectorRegistry
    metrics: PoolMetrics
    heartbeat: PoolHeartbeat

    def run(self, stop: Any) -> None:
        """The heartbeat (lease renewal, lanes row) around the consumer runtime."""
        self.heartbeat.start()
        try:
            self.runtime.run(stop)
        finally:
            if self.handler.claims is not None:
                self.handler.claims.stopping.set()
            self.heartbeat.close()


def build_pool_member(
    config: PoolConfig,
    *,
    step: StepFn,
    registry: CollectorRegistry | None = None,
    apply_topics: bool = True,
    factories: Factories = DEFAULT_FACTORIES,
) -> PoolMember:
    """One member of ``fleet.pool.<pool>`` on topic ``fleet.pool.<pool>`` (issue 10): the
    consumer runtime with an in-flight dispatcher, the pool handler, failure ports."""
    topics = TopicNames(prefix=config.topic_prefix)
    topic, group = topics.pool(config.pool), topics.pool_group(config.pool)
    if apply_topics:
        ensure_pool_topic(
            config.bootstrap,
            topics,
            config.pool,
            partitions=config.partitions,
            admin_factory=factories.admin,
        )
    registry = registry or CollectorRegistry()
    engine = factories.engine(config.store_url)
    sessions = session_factory(engine)
    metrics = PoolMetrics(registry, pool=config.pool)
    dedupe_header = "msgId" if config.dedupe else None
    step_keys = KeyClass.for_topic(
        config.key_class,
        retention_s=config.replay_window_ms / 1000,
        topic_retention_ms=config.replay_window_ms,
        lease_s=config.step_lease_s,
    )
    claims = StepClaims(
        IdempotencyStore([step_keys], metrics=IdempotencyMetrics(registry)),
        sessions,
        key_class=step_keys.name,
    )
    handler = PoolHandler(
        step,
        scope=group,
        member=config.member,
        reads=read_sessions(engine),
        claims=claims,
        dedupe_header=dedupe_header,
        metrics=metrics,
        events_path=config.events_path,
    )
    heartbeat = PoolHeartbeat(
        claims=handler.claims,
        sessions=sessions,
        pool=config.pool,
        member=config.member,
        running=handler.running_since,
        period_s=config.heartbeat_s,
        metrics=metrics,
    )
    ports = FailurePorts(
        writer=DeadLetterWriter(
            factories.producer(producer_config(config.bootstrap)),
            topics,
            gateway=f"pool.{config.pool}",
            group=group,
        ),
        store=QuarantineStore(engine),
        metrics=FailureMetrics(registry),
    )
    dispatcher = Dispatcher(
        InflightConfig(
            mode=config.concurrency,
            max_in_flight=config.max_in_flight,
            max_records=config.max_poll_records,
            depth=config.depth,
            revoke_wait_s=config.revoke_wait_s,
        ),
        handler,
        observer=metrics,
    )
    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=config.bootstrap,
            group_id=group,
            topics=(topic,),
            instance_id=config.instance_id,
            dedupe_header=dedupe_header,
            batch_size=config.max_poll_records,
            consumer_overrides=pool_consumer_overrides(
                assignment=config.assignment.value,
                max_poll_interval_ms=config.max_poll_interval_ms,
                session_timeout_ms=config.session_timeout_ms,
                client_id=config.member,
            ),
        ),
        handler=handler,
        sessions=sessions,
        dead_letters=ports,
        quarantine=ports,
        metrics=RuntimeMetrics(registry),
        consumer_factory=factories.consumer,
        inflight=dispatcher,
    )
    return PoolMember(
        runtime=runtime,
        handler=handler,
        engine=engine,
        registry=registry,
        metrics=metrics,
        heartbeat=heartbeat,
    )


@dataclass
class SagaProcess:
    """A saga orchestrator or participant process: its consumer runtime, relay and ticker."""

    runtime: ConsumerRuntime
    relay: Relay
    engine: Engine
    ticker: Callable[[], object] | None = None

    def run(self, stop: Any, *, tick_s: float = 0.5) -> None:
        """Run consumer, relay (and the orchestrator's approval-expiry ticker) until ``stop``."""
        import threading

        threads = [threading.Thread(target=self.relay.run_forever, args=(stop,), daemon=True)]
        if self.ticker is not None:
            ticker = self.ticker

            def tick() -> None:
                while not stop.wait(tick_s):
                    ticker()

            threads.append(threading.Thread(target=tick, daemon=True))
        for t in threads:
            t.start()
        try:
            self.runtime.run(stop)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
            self.relay.close()
            self.engine.dispose()


def build_saga_process(
    *,
    bootstrap: str,
    store_url: str,
    role: str,
    handler: Any,
    topics: Any,
    topic_prefix: str = "fleet.",
    registry: CollectorRegistry | None = None,
    ticker: Callable[[Engine], Callable[[], object]] | None = None,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> SagaProcess:
    """One saga process (``docs/sagas.md``): ``role`` is ``orchestrator`` or a participant name.

    The orchestrator consumes ``topics.replies`` with a :class:`ReplyHandler`; a participant
    consumes ``topics.commands(role)`` with its :class:`Participant`. Dead letters and every
    command/reply leave through this store's outbox, shipped by this process's relay.
    """
    registry = registry or CollectorRegistry()
    engine = engine or factories.engine(store_url)
    topic = topics.replies if role == "orchestrator" else topics.commands(role)
    group = f"{topics.prefix}.saga.{role}"
    runtime = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=group, topics=(topic,), ordered=False),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=OutboxDeadLetterSink(
            topics=TopicNames(prefix=topic_prefix), gateway=f"saga-{role}", group=group
        ),
        metrics=RuntimeMetrics(registry),
        consumer_factory=factories.consumer,
    )
    relay = Relay(
        engine=engine,
        bootstrap=bootstrap,
        registry=registry,
        idle_wait_s=0.01,
        producer_factory=factories.producer,
    )
    return SagaProcess(
        runtime=runtime,
        relay=relay,
        engine=engine,
        ticker=None if ticker is None else ticker(engine),
    )


def build_mcp_server(config: GatewayConfig, *, signer: Signer, gid: str) -> MCPServer:
    """The stdio MCP server of main ``gid`` (``fleet mcp --as``): a pull entity of this host."""
    from pipeline.mcp import build_server

    entity = next((e for e in config.entities if e.gid == gid), None)
    if entity is None or entity.delivery is not Delivery.PULL:
        what = "not an entity" if entity is None else "an inject entity, not a pull entity"
        raise ConfigError(
            f"--as {gid}: {what} of host {config.host}; a main over MCP is a local pull entity",
            reason=Config.CONFIG_INVALID,
            context={"key": "as", "value": gid},
        )
    engine = make_engine(config.store_url)
    return build_server(
        build_client(config, signer=signer, engine=engine),
        gid=gid,
        control=build_control_client(config, signer=signer, engine=engine),
    )
