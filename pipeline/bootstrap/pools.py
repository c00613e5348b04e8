"""A worker-pool member: the consumer runtime with the in-flight dispatcher and step claims."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    Factories,
)
from pipeline.effects import IdempotencyMetrics, IdempotencyStore, KeyClass
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.metrics import FailureMetrics
from pipeline.failures.quarantine import QuarantineStore
from pipeline.failures.runtime_adapters import FailurePorts
from pipeline.hooks import NO_HOOKS, Hooks
from pipeline.kafka.settings import (
    pool_consumer_overrides,
    producer_config,
)
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool import PoolConfig, PoolHandler
from pipeline.pool.claims import StepClaims
from pipeline.pool.heartbeat import Heartbeat as PoolHeartbeat
from pipeline.pool.metrics import PoolMetrics
from pipeline.pool.steps import StepFn
from pipeline.retention.purger import Purger
from pipeline.retention.rules import POOL_MEMBER_TABLES
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.inflight import Dispatcher, InflightConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.store import serialize_writes, session_factory

from .retention import purger_for

if TYPE_CHECKING:
    pass


@dataclass
class PoolMember:
    """Everything :func:`build_pool_member` made: ``run(stop)``, then dispose ``engine``."""

    runtime: ConsumerRuntime
    handler: PoolHandler
    engine: Engine
    registry: CollectorRegistry
    metrics: PoolMetrics
    heartbeat: PoolHeartbeat
    purger: Purger | None = None

    def run(self, stop: Any, *, join_at: float | None = None) -> None:
        """The heartbeat (lease renewal, lanes row) and the store purge around the consumer
        runtime. ``join_at`` (epoch seconds): warm the store up, then join the group no earlier
        than that -- a replacement started ahead of its outage's end (``fleet lab run``) has
        paid its start-up by then, so the outage lasts what the scenario says."""
        if join_at is not None:
            self.runtime.warm_up()
            if stop.wait(max(0.0, join_at - time.time())):
                self._stopped_before_joining()
                return
        self.heartbeat.start()
        purging = threading.Event()
        purge = self.purger.start(purging) if self.purger is not None else None
        try:
            self.runtime.run(stop)
        finally:
            purging.set()
            if self.handler.claims is not None:
                self.handler.claims.stopping.set()
            self.heartbeat.close()
            self.handler.close()
            if purge is not None:
                purge.join(timeout=10)

    def _stopped_before_joining(self) -> None:
        """A stop while waiting to join: close without subscribing. Subscribing and closing at
        once could leave a JoinGroup the coordinator completes after the leave -- a member with
        no partitions listed in the group until its session times out."""
        self.runtime.close()
        if self.runtime.inflight is not None:
            self.runtime.inflight.close()
        self.handler.close()


def build_pool_member(
    config: PoolConfig,
    *,
    step: StepFn,
    registry: CollectorRegistry | None = None,
    apply_topics: bool = True,
    factories: Factories = DEFAULT_FACTORIES,
    hooks: Hooks = NO_HOOKS,
) -> PoolMember:
    """One member of ``fleet.pool.<pool>`` on topic ``fleet.pool.<pool>``: the
    consumer runtime with an in-flight dispatcher, the pool handler, failure ports. ``hooks``:
    crash points and planted bugs for the chaos suite (``pipeline/hooks.py``), off in
    production."""
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
    # SQLite: the member's threads (step claims and results, batches) queue in-process, and
    # the members sharing the file queue on its lock file (not in SQLite's busy handler)
    engine = serialize_writes(factories.engine(config.store_url), across_processes=True)
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
        engine,  # plain connections for the claim / result transactions
        key_class=step_keys.name,
    )
    handler = PoolHandler(
        step,
        scope=group,
        member=config.member,
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
            cover_refetch=config.partition_buffer is None,
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
            retry=config.retry,
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
        hooks=hooks,
    )
    purger = None
    if config.retention is not None:
        purger = purger_for(engine, config.retention, POOL_MEMBER_TABLES, registry=registry)
    return PoolMember(
        runtime=runtime,
        handler=handler,
        engine=engine,
        registry=registry,
        metrics=metrics,
        heartbeat=heartbeat,
        purger=purger,
    )
