"""Standalone processes beside a gateway: the FAILED reporters, the outbox relay and the exporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    Factories,
)
from pipeline.envelope import Signer, TrustStore
from pipeline.failures.failed_to_topic import TopicFailedSink
from pipeline.failures.metrics import FailureMetrics
from pipeline.failures.reporter import FailedReporter
from pipeline.gateway.failed_for_dead_letter import EnvelopeFailedSink
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.outbound import Publisher
from pipeline.kafka.settings import (
    OffsetReset,
    consumer_config,
    producer_config,
)
from pipeline.kafka.topics import TopicNames
from pipeline.observability import ExporterConfig, KafkaOffsetReader
from pipeline.observability import build_exporter as start_exporter
from pipeline.observability.exporter import Exporter
from pipeline.outbox import Relay
from pipeline.runtime.offsets import assign_from_committed

if TYPE_CHECKING:
    pass


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
    """The DLQ's FAILED reporter running as ``config.host`` (R-DLQ-4).

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
        engine=factories.store(config),
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
