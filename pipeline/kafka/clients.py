"""The one place a real Kafka client is constructed from its settings.

Every adapter that needs a client takes a :data:`ClientFactory` (``conf -> client``) whose
default is one of these; ``pipeline.bootstrap.Factories`` hands the same three to everything it
builds, so a test (fakes) or a secured cluster (SASL/TLS settings, a wrapping client)
changes client construction in one place. The settings themselves come from
:mod:`pipeline.kafka.settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ClientFactory = Callable[[dict[str, Any]], Any]
"""Builds a client from its librdkafka configuration."""


# confluent_kafka is imported on first use, so modules that only name a default factory (the
# outbox, the runtime) stay importable without loading librdkafka.
def new_producer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    return Producer(conf)


def new_consumer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(conf)


def new_admin(conf: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf)
