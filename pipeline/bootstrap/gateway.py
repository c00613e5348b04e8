"""The gateway graph: inbox runtime, relay, presence, control plane and maintenance, wired once."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline import schemas
from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    Factories,
    build_client,
    build_control_client,
)
from pipeline.control import SPAWN, STOP
from pipeline.control.client import ControlClient
from pipeline.control.metrics import LifecycleMetrics
from pipeline.envelope import BatchVerifier, BoundedSeenSet, Kind, Signer, TrustStore, Verifier
from pipeline.gateway import loops
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.failed_for_refused_row import RelayFailedSink
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import InjectMetrics, Injector, build_injector
from pipeline.gateway.maintenance import Maintenance
from pipeline.gateway.metrics import GatewayMetrics, SocketMetrics
from pipeline.gateway.nudge import Nudger
from pipeline.gateway.service import Gateway, Supervised
from pipeline.gateway.socket_server import SocketServer
from pipeline.hooks import NO_HOOKS, Hooks
from pipeline.host import roster_cache
from pipeline.host.conversations import Conversations
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import HeldStore
from pipeline.host.outbound import Publisher
from pipeline.host.tracking import FORWARD
from pipeline.kafka.errors import wait_out
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.observability.thread_cpu import register_thread_cpu
from pipeline.observability.wal_checkpoints import register_wal_checkpoints
from pipeline.outbox import Relay
from pipeline.outbox.notify import listen_forever, woken_in_process
from pipeline.outbox.wake import wake_on_commit
from pipeline.presence import RosterView
from pipeline.retention.metrics import RetentionMetrics
from pipeline.retention.purger import Purger
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.routing import ByTopic
from pipeline.store import metadata, read_sessions, serialize_writes, session_factory
from pipeline.store.first_statistics import FirstStatistics
from pipeline.tracing import TracingSettings
from pipeline.tracing.settings import OFF as TRACING_OFF

from .control_plane import build_control_plane, build_job_ledger
from .presence import build_presence
from .retention import RULES
from .tracing import install_tracing

if TYPE_CHECKING:
    pass


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
    socket: SocketServer | None = None


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


def _on_stop_and_refusal(
    gateway: Gateway, factories: Factories, hooks: list[Callable[[], None]]
) -> None:
    """The stop hooks, in order, and a login refused after start (a rotated password met on a
    reconnect) stops the gateway loudly where librdkafka would retry it for ever
    (docs/security.md, "Rotating a login")."""
    gateway.on_stop.extend(hooks)
    factories.on_login_refused(gateway.fail)


def build_gateway(
    config: GatewayConfig,
    *,
    signer: Signer,
    trust: TrustStore,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    registry: CollectorRegistry | None = None,
    apply_topics: bool = True,
    relay_poll_s: float = 0.05,
    maintenance_interval_s: float | None = None,
    factories: Factories = DEFAULT_FACTORIES,
    hooks: Hooks = NO_HOOKS,
    tracing: TracingSettings = TRACING_OFF,
) -> GatewayParts:
    """Build one host's gateway: inbox runtime, relay, presence, roster, injectors, ticker.
    ``tracing``: OpenTelemetry spans on or off (the entry point reads the ``OTEL_*``
    variables); the gateway's stop flushes them. Structured bodies this process writes from
    here on take ``config.body_framing``."""
    schemas.write_framing(config.body_framing)
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
                    replication=None,  # the cluster's default; RF 3 topics are accepted
                ),
                admin_factory=factories.admin,
            ),
            what=f"gateway {host}: topology",
            deadline_s=120.0,
            log=log,
        )
    # SQLite: the gateway's writers (inbox, injects, relay, socket, maintenance) queue in-process
    engine = serialize_writes(factories.store(config))
    sessions = session_factory(engine)
    reads = read_sessions(engine)
    metrics = GatewayMetrics(registry)
    register_thread_cpu(registry)
    register_wal_checkpoints(registry)

    roster, follower, presence, pairing = build_presence(
        config, factories, signer, trust, sessions, registry
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
        pairing=pairing,
    )
    # one set of inject instruments for the configured and the spawned workers
    entities = LocalEntities.from_config(
        config, callbacks=callbacks, metrics=(inject_metrics := InjectMetrics(registry))
    )
    publisher = Publisher(host=host, signer=signer, topics=topics, pairing=pairing)
    injections = InjectionQueue(
        entities=entities,
        sessions=sessions,
        publisher=publisher,
        metrics=metrics,
        hooks=hooks,
        burst=config.inject_burst,
        batches_receipts=functools.partial(roster.takes, kind=Kind.RECEIPTS.value),
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
        # a batch's signatures are checked on every core before its transaction
        batch_verifier=BatchVerifier(verifier, threads=min(4, os.cpu_count() or 1)),
    )
    group = topics.gateway_group(host)
    dead_letters = OutboxDeadLetterSink(topics=topics, gateway=host, group=group)
    spawn_handler = build_control_plane(
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
        hooks=hooks,
        ledger=build_job_ledger(config, signer, trust, factories),
    )
    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=config.bootstrap,
            group_id=group,
            topics=(topics.inbox(host), topics.control(host)),
            instance_id=host,
            ordered=False,
            pipelined_commit=config.pipelines_commit,  # REPLYs not waiting on briefs
        ),
        handler=ByTopic({topics.control(host): spawn_handler}, default=handler),
        sessions=sessions,
        dead_letters=dead_letters,
        metrics=RuntimeMetrics(registry),
        consumer_factory=factories.consumer,
        hooks=hooks,
    )
    relay = Relay(
        engine=engine,
        bootstrap=config.bootstrap,
        registry=registry,
        idle_wait_s=relay_poll_s,
        pass_spacing_s=config.relay_spacing_ms / 1000,
        terminal_sink=RelayFailedSink(publisher=publisher, ttl_s=config.max_ttl_s),
        producer_factory=factories.producer,
        hooks=hooks,
    )
    injections.on_receipts = relay.wake  # a burst's receipts ship at once, not at the next poll
    # a commit of the gateway's sessions that wrote outbox rows (an inbox batch's reply,
    # maintenance's FAILED...) wakes the relay at once; one that wrote none (a held REPLY, a
    # presence write) does not make it pass for nothing (docs/outbox.md, invariant 9)
    wake_on_commit(sessions, relay.wake)
    woken_in_process(engine)  # PostgreSQL: so its commits send no NOTIFY (outbox/notify.py)
    bindings = roster_cache.KnownBindings()  # the socket's sends, kept per mirror change
    maintenance = Maintenance(
        sessions=sessions,
        held=HeldStore(sessions),
        conversations=conversations,
        dead_letters=dead_letters,
        publisher=publisher,
        metrics=metrics,
        max_ttl_s=config.max_ttl_s,
        roster_entries=functools.partial(loops.roster_rows, roster),
        roster_state=functools.partial(loops.roster_state, roster),
        roster_ready=follower.caught_up.is_set,  # the bindings wait for a caught-up view
        entities=entities,
        injections=injections,
        tracked=tracked,
        purger=Purger(
            engine=engine,
            policy=config.retention,
            metrics=RetentionMetrics(registry),
            rules=RULES,
        ),
        on_roster_written=bindings.changed,
        statistics=FirstStatistics(engine, [t.name for t in metadata.sorted_tables]),
    )
    nudger = _build_nudger(config, callbacks, reads, conversations, metrics, publisher)
    client = build_client(
        config,
        signer=signer,
        engine=engine,
        factories=factories,
        metrics=metrics,
        pairing=pairing,
        bindings=bindings,
    )
    interval = maintenance_interval_s or config.sweep_interval_s
    server = _local_socket(
        config,
        client,
        relay,
        SocketMetrics(registry),
        build_control_client(config, signer=signer, engine=engine, factories=factories),
    )

    announced = threading.Event()
    gateway = Gateway(
        host=host,
        loops=[
            Supervised(
                "presence",
                functools.partial(
                    loops.run_presence, config, presence, follower, sessions, announced
                ),
            ),
            Supervised("roster", follower.run),
            Supervised(
                "inbox",
                functools.partial(
                    loops.run_inbox, follower, spawn_handler, maintenance, injections, runtime
                ),
                restart=False,
            ),
            # the last to stop: its final pass ships what the other loops and the inject
            # workers committed (the receipts of the stop's last injects)
            Supervised(
                "relay",
                functools.partial(loops.run_relay, relay, announced),
                last=True,
                wake=relay.wake,  # watched (SQLite), its idle wait sees its stop only woken
            ),
            # PostgreSQL: every commit of an outbox row (the inbox's receipts too) wakes the relay
            *(
                [Supervised("relay-wake", functools.partial(listen_forever, engine, relay.wake))]
                if engine.dialect.name == "postgresql"
                else []
            ),
            Supervised(
                "maintenance",
                functools.partial(loops.run_maintenance, maintenance, spawn_handler, interval),
            ),
            *([Supervised("nudge", nudger.run)] if nudger.targets else []),
            *([Supervised("socket", server.run)] if server is not None else []),
        ],
    )
    gateway.on_quiesce.append(injections.stop)  # a burst under way ends, its receipts committed
    _on_stop_and_refusal(
        gateway,
        factories,
        [
            lambda: loops.stop_presence(presence, gateway, config.away_grace_s),
            follower.stop,
            relay.close,
            *([spawn_handler.ledger.close] if spawn_handler.ledger is not None else []),
            maintenance.close,
            spawn_handler.close,
            engine.dispose,
            install_tracing(tracing, host=host),  # on from here; its stop flushes the spans
        ],
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
        socket=server,
    )


def _local_socket(
    config: GatewayConfig,
    client: GatewayClient,
    relay: Relay,
    metrics: SocketMetrics,
    control: ControlClient,
) -> SocketServer | None:
    """Local entities hand their sends to this process, the store's one writer; each commit wakes
    the relay (docs/gateway.md, "The local socket")."""
    path = config.local_socket
    if not path:
        return None
    return SocketServer(
        path=path,
        client=client,
        on_commit=relay.wake,
        mode=config.socket_mode,
        metrics=metrics,
        control=control,
        spacing_s=config.socket_spacing_ms / 1000,
    )
