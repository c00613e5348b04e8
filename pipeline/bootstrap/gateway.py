"""The gateway graph: inbox runtime, relay, presence, control plane and maintenance, wired once."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    Factories,
    build_client,
    build_control_client,
)
from pipeline.control import SPAWN, STOP
from pipeline.control.client import ControlClient
from pipeline.control.handler import SpawnHandler
from pipeline.control.launcher import Launcher, worker_injector
from pipeline.control.metrics import LifecycleMetrics
from pipeline.control.reaper import Reaper
from pipeline.control.stop_handler import StopHandler
from pipeline.envelope import BatchVerifier, BoundedSeenSet, Signer, TrustStore, Verifier
from pipeline.envelope.model import now_ms
from pipeline.envelope.pairwise import AgreementKey, Pairing
from pipeline.errors import FencedError
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.deadletters import OutboxDeadLetterSink, dead_letter_held, undrained
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import InjectMetrics, Injector, build_injector
from pipeline.gateway.maintenance import Maintenance
from pipeline.gateway.metrics import GatewayMetrics, SocketMetrics
from pipeline.gateway.nudge import Nudger
from pipeline.gateway.relay_failed import RelayFailedSink
from pipeline.gateway.service import Gateway, Supervised
from pipeline.gateway.socket_server import SocketServer
from pipeline.hooks import NO_HOOKS, Hooks
from pipeline.host.conversations import Conversations
from pipeline.host.entity_config import ProfileConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import HeldStore
from pipeline.host.incarnation import take_incarnation
from pipeline.host.outbound import Publisher
from pipeline.host.roster_cache import RosterEntry, RosterState
from pipeline.host.tracking import FORWARD
from pipeline.kafka.errors import wait_out
from pipeline.kafka.settings import (
    producer_config,
)
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.outbox import Relay
from pipeline.outbox.notify import listen_forever
from pipeline.presence import PresencePublisher, RosterFollower, RosterView
from pipeline.presence.follower import echo_slack_s
from pipeline.presence.metrics import PresenceMetrics
from pipeline.presence.model import Delivery, Gone, Role, SpawnProfile, gateway_gid
from pipeline.presence.publisher import ProducerLike
from pipeline.reasons import Lifecycle
from pipeline.retention.metrics import RetentionMetrics
from pipeline.retention.purger import Purger
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.routing import ByTopic
from pipeline.store import read_sessions, serialize_writes, session_factory

from .retention import RULES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


log = logging.getLogger(__name__)

PRESENCE_FIRST_FLUSH_S = 10.0  # bounded: a broker that is down delays nothing further


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


def _stop_presence(presence: PresencePublisher, gateway: Gateway) -> None:
    """Fenced: another gateway now speaks for this host; its presence is not ours to retract."""
    presence.stop(retract=not isinstance(gateway.fatal, FencedError))


def _roster_caught_up(follower: RosterFollower, stop: Any) -> bool:
    """Wait for the roster's first catch-up; False when the gateway stops first."""
    while not follower.caught_up.wait(0.2):
        if stop.is_set():
            return False
    return True


def _run_presence(
    config: GatewayConfig,
    presence: PresencePublisher,
    follower: RosterFollower,
    sessions: sessionmaker[Session],
    announced: threading.Event,
    stop: Any,
) -> None:
    """The presence loop: announce the configured entities at once and heartbeat; every interval,
    take a new incarnation if the roster holds a higher one of this host (a twin with this host
    id, or a wiped store that started below its previous run: docs/presence.md "Order").
    Announcing does not wait for the roster to catch up: a restarted host's entities read as
    departed (its clean stop's tombstones) until it announces them, so every second of waiting
    refused sends to them ``UNKNOWN_RECIPIENT``. ``announced`` is set once the first heartbeats
    are on the broker (see :func:`_run_relay`)."""
    for e in config.entities:
        presence.register(e.gid, role=e.role, delivery=e.delivery, groups=e.groups)
    presence.start()
    presence.flush(PRESENCE_FIRST_FLUSH_S)  # on the broker before the relay ships a backlog
    announced.set()
    host = config.host
    while not stop.wait(config.presence_interval_s):
        presence.outranked(
            follower.view.incarnation_of(host),
            lambda seen: take_incarnation(sessions, host, seen=seen),
        )


def _run_relay(relay: Relay, announced: threading.Event, stop: Any) -> None:
    """The relay ships only once this host's presence is announced: a restarted gateway's
    backlog reaching a peer before the presence that binds its senders would be dead-lettered
    there ``UNKNOWN_SENDER`` (its entities read as departed since the clean stop's tombstones).
    Sends are accepted meanwhile; they wait in the outbox, as during an outage."""
    while not announced.wait(0.2):
        if stop.is_set():
            return
    relay.run_forever(stop)


def _on_stop_and_refusal(
    gateway: Gateway, factories: Factories, hooks: list[Callable[[], None]]
) -> None:
    """The stop hooks, in order, and a login refused after start (a rotated password met on a
    reconnect) stops the gateway loudly where librdkafka would retry it for ever
    (docs/security.md, "Rotating a login")."""
    gateway.on_stop.extend(hooks)
    factories.on_login_refused(gateway.fail)


def _before_inbox(
    spawn_handler: SpawnHandler, maintenance: Maintenance, injections: InjectionQueue
) -> None:
    """Once the roster caught up, before the inbox runs: live workers re-adopted, the roster
    cache written, and every inject a crash left unrecorded reported (the inject journal)."""
    spawn_handler.relive()
    maintenance.refresh_roster()
    injections.report_uncertain()


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
                    replication=None,  # the cluster's default; RF 3 topics are accepted
                ),
                admin_factory=factories.admin,
            ),
            what=f"gateway {host}: topology",
            deadline_s=120.0,
            log=log,
        )
    # SQLite: the gateway's writers (inbox, injects, relay, socket, maintenance) queue in-process
    engine = serialize_writes(factories.engine(config.store_url))
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
        own_gid=gateway_gid(host),  # its host entry, heartbeated every presence interval
        echo_slack_s=echo_slack_s(
            ttl_s=config.presence_ttl_s, interval_s=config.presence_interval_s
        ),
    )
    presence = PresencePublisher(  # with the pairwise mode on, the host entry carries its key
        metrics=presence_metrics,
        producer=cast("ProducerLike", factories.producer(producer_config(config.bootstrap))),
        signer=signer,
        topics=topics,
        interval_s=config.presence_interval_s,
        ttl_s=config.presence_ttl_s,
        profiles=[SpawnProfile(name=p.name, description=p.description) for p in config.profiles],
        agreement_key=None
        if (pairing := _pairing(config, signer, roster, trust)) is None
        else pairing.own.public_bytes,
        # taken at the first heartbeat, above the store's count and what the roster holds then;
        # the presence loop takes a higher one if the caught-up roster outranks it
        incarnation=lambda: take_incarnation(sessions, host, seen=roster.incarnation_of(host)),
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
        # issue 17: a batch's signatures are checked on every core before its transaction
        batch_verifier=BatchVerifier(verifier, threads=min(4, os.cpu_count() or 1)),
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
        hooks=hooks,
    )
    relay = Relay(
        engine=engine,
        bootstrap=config.bootstrap,
        registry=registry,
        idle_wait_s=relay_poll_s,
        terminal_sink=RelayFailedSink(publisher=publisher, ttl_s=config.max_ttl_s),
        producer_factory=factories.producer,
        hooks=hooks,
    )
    injections.on_receipts = relay.wake  # a burst's receipts ship at once, not at the next poll
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
        purger=Purger(
            engine=engine,
            policy=config.retention,
            metrics=RetentionMetrics(registry),
            rules=RULES,
        ),
    )
    nudger = _build_nudger(config, callbacks, reads, conversations, metrics, publisher)
    client = build_client(
        config, signer=signer, engine=engine, factories=factories, metrics=metrics, pairing=pairing
    )
    interval = maintenance_interval_s or config.sweep_interval_s
    server = _local_socket(
        config,
        client,
        relay,
        SocketMetrics(registry),
        build_control_client(config, signer=signer, engine=engine, factories=factories),
    )

    def run_runtime(stop: Any) -> None:
        # verification step 2 needs the bindings: the inbox starts once the roster has caught
        # up (the roster loop waits out transient broker errors meanwhile)
        if not _roster_caught_up(follower, stop):
            return
        _before_inbox(spawn_handler, maintenance, injections)
        runtime.run(stop)

    def run_maintenance(stop: Any) -> None:
        while not stop.wait(min(interval, 0.5)):
            maintenance.tick(stop)  # a stop ends a purge pass between two batches
            try:
                spawn_handler.sweep()  # reap workers whose process died (§8 step 7)
            except Exception:
                log.exception("maintenance duty spawn_handler.sweep failed")

    announced = threading.Event()
    gateway = Gateway(
        host=host,
        loops=[
            Supervised(
                "presence",
                functools.partial(_run_presence, config, presence, follower, sessions, announced),
            ),
            Supervised("roster", follower.run),
            Supervised("inbox", run_runtime, restart=False),
            Supervised("relay", functools.partial(_run_relay, relay, announced)),
            # PostgreSQL: every commit of an outbox row (the inbox's receipts too) wakes the relay
            *(
                [Supervised("relay-wake", functools.partial(listen_forever, engine, relay.wake))]
                if engine.dialect.name == "postgresql"
                else []
            ),
            Supervised("maintenance", run_maintenance),
            *([Supervised("nudge", nudger.run)] if nudger.targets else []),
            *([Supervised("socket", server.run)] if server is not None else []),
        ],
    )
    _on_stop_and_refusal(
        gateway,
        factories,
        [
            injections.stop,
            lambda: _stop_presence(presence, gateway),
            follower.stop,
            relay.close,
            engine.dispose,
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


def _pairing(
    config: GatewayConfig, signer: Signer, roster: RosterView, trust: TrustStore
) -> Pairing | None:
    """The pairwise MAC mode (docs/envelope.md), when ``pairwise_mac`` is on: the agreement key
    derived from the host key, the peers' keys from signed presence, vouchers from the trust
    store. Off: every record is signed and a MAC'd one is refused (``MAC_NOT_ALLOWED``)."""
    if not config.pairwise_mac:
        return None
    return Pairing(own=AgreementKey.from_signer(signer), peers=roster, trusted=trust.lookup)


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
