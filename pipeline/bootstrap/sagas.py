"""A saga orchestrator process: its store, topics and consumer runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    Factories,
)
from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
from pipeline.kafka.topics import TopicNames
from pipeline.outbox import Relay
from pipeline.retention import RetentionConfig
from pipeline.retention.purger import Purger
from pipeline.retention.rules import SAGA_TABLES
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.store import session_factory

from .retention import purger_for

if TYPE_CHECKING:
    pass

DEFAULT_RETENTION = RetentionConfig()


@dataclass
class SagaProcess:
    """A saga orchestrator or participant process: its consumer runtime, relay and ticker."""

    runtime: ConsumerRuntime
    relay: Relay
    engine: Engine
    ticker: Callable[[], object] | None = None
    purger: Purger | None = None
    registry: CollectorRegistry | None = None

    def run(self, stop: Any, *, tick_s: float = 0.5) -> None:
        """Run consumer, relay, the store purge (and the orchestrator's approval-expiry ticker)
        until ``stop``."""
        import threading

        threads = [threading.Thread(target=self.relay.run_forever, args=(stop,), daemon=True)]
        if self.purger is not None:
            threads.append(
                threading.Thread(target=self.purger.run_forever, args=(stop,), daemon=True)
            )
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
            self.relay.wake()  # its idle wait looks at ``stop`` only when woken (SQLite)
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
    retention: RetentionConfig | None = DEFAULT_RETENTION,
    factories: Factories = DEFAULT_FACTORIES,
) -> SagaProcess:
    """One saga process (``docs/sagas.md``): ``role`` is ``orchestrator`` or a participant name.

    The orchestrator consumes ``topics.replies`` with a :class:`ReplyHandler`; a participant
    consumes ``topics.commands(role)`` with its :class:`Participant`. Dead letters and every
    command/reply leave through this store's outbox, shipped by this process's relay.
    ``retention`` says how it purges its store (finished sagas, sent outbox rows, dedupe rows,
    expired idempotency keys: docs/store.md), counted in ``registry``; ``None``: it does not.
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
        purger=None
        if retention is None
        else purger_for(engine, retention, SAGA_TABLES, registry=registry),
        registry=registry,
    )
