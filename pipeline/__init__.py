"""fleet-pipeline: signed agent messaging on Apache Kafka.

The public API is exactly ``__all__`` (``tests/unit/test_public_api.py`` holds it to that).
Names resolve lazily, so ``import pipeline`` stays cheap and cannot create import cycles.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.12.0"

_EXPORTS: dict[str, str] = {
    # errors and settings
    "FleetError": "pipeline.errors",
    "AckMode": "pipeline.runtime.staging",
    "TopicNames": "pipeline.kafka.topics",
    # the envelope
    "Envelope": "pipeline.envelope",
    "Kind": "pipeline.envelope",
    "Signer": "pipeline.envelope",
    "TrustStore": "pipeline.envelope",
    "Verifier": "pipeline.envelope",
    # the gateway
    "GatewayConfig": "pipeline.host.gateway_config",
    "EntityConfig": "pipeline.host.entity_config",
    "load_config": "pipeline.host.config",
    "GatewayClient": "pipeline.gateway.client",
    "build_gateway": "pipeline.bootstrap.gateway",
    "build_client": "pipeline.bootstrap.client",
    # the consumer runtime and handler outcomes
    "ConsumerRuntime": "pipeline.runtime",
    "RuntimeConfig": "pipeline.runtime",
    "Record": "pipeline.runtime",
    "Staged": "pipeline.runtime",
    "Ack": "pipeline.runtime.outcomes",
    "Retry": "pipeline.runtime.outcomes",
    "DeadLetter": "pipeline.runtime.outcomes",
    "Quarantine": "pipeline.runtime.outcomes",
    "BackoffPolicy": "pipeline.runtime.retry",
    # dead letters: one context value, the broker sink for library users (no outbox needed)
    "FailureContext": "pipeline.runtime.context",
    "FailurePorts": "pipeline.failures.runtime_adapters",
    # the outbox
    "Relay": "pipeline.outbox",
    "Fold": "pipeline.outbox",
    # a real broker, locally
    "LocalCluster": "pipeline.kafka.local",
    "LauncherConfig": "pipeline.kafka.local",
}

__all__ = [
    "Ack",
    "AckMode",
    "BackoffPolicy",
    "ConsumerRuntime",
    "DeadLetter",
    "EntityConfig",
    "Envelope",
    "FailureContext",
    "FailurePorts",
    "FleetError",
    "Fold",
    "GatewayClient",
    "GatewayConfig",
    "Kind",
    "LauncherConfig",
    "LocalCluster",
    "Quarantine",
    "Record",
    "Relay",
    "Retry",
    "RuntimeConfig",
    "Signer",
    "Staged",
    "TopicNames",
    "TrustStore",
    "Verifier",
    "build_client",
    "build_gateway",
    "load_config",
]

assert set(__all__) == set(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
