"""Outbox instruments, on an injected registry. Label values come only from bounded sets.

R-OUT-7: "emit relay lag as a metric -- outbox backlog is one of the two that grow
silently". R-OUT-7: "alert on the age of the oldest unsent row".
"""

from __future__ import annotations

import enum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pipeline.reasons import ProducePermanent


class PublishFailure(enum.StrEnum):
    """Why a delivery report failed, folded into a closed set (never a raw broker message)."""

    TIMEOUT = "timeout"  # unconfirmed past delivery_timeout_s (still queued, in order)
    TRANSPORT = "transport"  # broker unreachable / connection lost
    FATAL = "fatal"  # the idempotent producer hit a fatal error and is rebuilt
    REJECTED = "rejected"  # the broker refused it (unknown topic, too large, not authorised)
    OTHER = "other"


class OutboxMetrics:
    """Backlog, oldest unsent age, relay lag, published and failed deliveries."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.backlog_rows = Gauge(
            "fleet_outbox_backlog_rows",
            "Outbox rows committed but not yet confirmed by the broker.",
            registry=registry,
        )
        self.oldest_unsent_age_seconds = Gauge(
            "fleet_outbox_oldest_unsent_age_seconds",
            "Age of the oldest unsent outbox row (0 when none is pending).",
            registry=registry,
        )
        self.relay_lag_seconds = Gauge(
            "fleet_outbox_relay_lag_seconds",
            "Commit-to-confirm delay of the oldest row in the relay's last batch "
            "(0 when the outbox is drained).",
            registry=registry,
        )
        self.batch_lag_seconds = Histogram(
            "fleet_outbox_batch_lag_seconds",
            "Per shipped batch: commit-to-confirm delay of its oldest row.",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600, 3600),
            registry=registry,
        )
        self.published_total = Counter(
            "fleet_outbox_published_total",
            "Outbox rows the broker confirmed and the relay marked sent.",
            registry=registry,
        )
        self.publish_errors_total = Counter(
            "fleet_outbox_publish_errors_total",
            "Failed delivery reports, by reason.",
            ["reason"],
            registry=registry,
        )
        for reason in PublishFailure:
            self.publish_errors_total.labels(reason=reason.value)
        self.rows_failed_total = Counter(
            "fleet_outbox_rows_failed_total",
            "Outbox rows made terminal FAILED by a permanent produce error, by reason.",
            ["reason"],
            registry=registry,
        )
        for permanent in ProducePermanent:
            self.rows_failed_total.labels(reason=permanent.value)
        self.stopped_branches = Gauge(
            "fleet_outbox_stopped_branches",
            "Branches stopped behind a FAILED row (nothing after it is published).",
            registry=registry,
        )

    def publish_error(self, reason: PublishFailure, count: int = 1) -> None:
        self.publish_errors_total.labels(reason=reason.value).inc(count)


def classify(err: Any) -> PublishFailure:
    """Fold a delivery error into :class:`PublishFailure` (bounded label values)."""
    try:
        from confluent_kafka import KafkaError
    except ImportError:  # pragma: no cover - the dependency is required
        return PublishFailure.OTHER
    if not isinstance(err, KafkaError):
        return PublishFailure.OTHER
    if err.fatal():
        return PublishFailure.FATAL
    code = err.code()
    if code == KafkaError._MSG_TIMED_OUT:
        return PublishFailure.TIMEOUT
    if code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
        return PublishFailure.TRANSPORT
    if code in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ):
        return PublishFailure.REJECTED
    return PublishFailure.OTHER
