"""The control plane of a gateway, wired: the SPAWN/STOP handler, its launcher and reaper.

A launched worker becomes a local inject entity with a presence; a STOP or a death takes it out
again (tombstone + reaped), and its undrained held rows are dead-lettered ``RECIPIENT_GONE``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.control.handler import SpawnHandler
from pipeline.control.job_ledger import JobLedger
from pipeline.control.launcher import Launcher, worker_injector
from pipeline.control.metrics import LifecycleMetrics
from pipeline.control.reaper import Reaper
from pipeline.control.stop_handler import StopHandler
from pipeline.envelope import Signer, TrustStore, Verifier
from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink, dead_letter_held, undrained
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.injectors import InjectMetrics, build_injector
from pipeline.hooks import NO_HOOKS, Hooks
from pipeline.host.entity_config import ProfileConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.outbound import Publisher
from pipeline.kafka.settings import consumer_config, merged, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence import PresencePublisher
from pipeline.presence.model import Delivery, Gone, Role
from pipeline.reasons import Lifecycle


def build_control_plane(
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
    hooks: Hooks = NO_HOOKS,
    ledger: JobLedger | None = None,
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
    roster: Any = getattr(verifier, "presence", None)

    def role_of(gid: str) -> str | None:
        """The role in ``gid``'s signed presence binding (None: no entry)."""
        entry = getattr(roster, "get", lambda _: None)(gid)
        return None if entry is None else str(entry.role)

    handler = SpawnHandler(
        host=config.host,
        verifier=verifier,
        publisher=publisher,
        sessions=sessions,
        profiles=profiles,
        launcher=launcher,
        on_live=on_live,
        count=lifecycle.count,
        stops=StopHandler(
            publisher=publisher,
            sessions=sessions,
            reaper=reaper,
            metrics=lifecycle,
            role_of=role_of,
            operators=config.operators,
        ),
        role_of=role_of,
        hooks=hooks,
        ledger=ledger,
    )
    return handler


def build_job_ledger(
    config: GatewayConfig, signer: Signer, trust: TrustStore, factories: Any
) -> JobLedger:
    """The job ledger's clients, made at first use (a host without profiles opens none): an
    idempotent producer and an assign-only reader of the ``jobs`` topic."""
    topics = TopicNames(prefix=config.topic_prefix)
    group = (
        f"{topics.prefix}jobs-reader.{config.host}"  # assign only: never joined, never committed
    )
    return JobLedger(
        host=config.host,
        topic=topics.jobs,
        signer=signer,
        trust=trust,
        producer=lambda: factories.producer(producer_config(config.bootstrap, **{"linger.ms": 0})),
        consumer=lambda: factories.consumer(
            merged(consumer_config(config.bootstrap, group), {"fetch.wait.max.ms": 10})
        ),
    )
