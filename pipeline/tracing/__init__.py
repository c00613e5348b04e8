"""The tracing seam: OpenTelemetry spans for a message's hops, off unless the root installs them.

Every layer from the runtime up calls into :data:`TRACING` with one guarded line::

    if TRACING.on: headers = TRACING.staged(envelope, topic, headers)

With tracing off (the default) ``TRACING.on`` is False and nothing else runs: no OpenTelemetry
module is imported, the guarded call costs one attribute read per message. The composition root
(``pipeline.bootstrap.tracing``) reads the standard ``OTEL_*`` variables, builds the SDK's
provider and exporter and installs an :class:`~pipeline.tracing.spans.OtelSpans` here
(docs/observability.md, "Tracing").
"""

from __future__ import annotations

from .names import (
    CONTROL_SPAWN,
    CONTROL_STOP,
    FAILED_REPORT,
    HOLD,
    INBOX_CONSUME,
    INJECT,
    OUTBOX_COMMIT,
    POOL_STEP,
    RECEIPT_STAGE,
    RELAY_PRODUCE,
    SEND,
    SPAN_NAMES,
    TRACEPARENT,
)
from .seam import TRACING, Message, Spans, Tracing
from .settings import TracingSettings, settings_from_env

__all__ = [
    "CONTROL_SPAWN",
    "CONTROL_STOP",
    "FAILED_REPORT",
    "HOLD",
    "INBOX_CONSUME",
    "INJECT",
    "OUTBOX_COMMIT",
    "POOL_STEP",
    "RECEIPT_STAGE",
    "RELAY_PRODUCE",
    "SEND",
    "SPAN_NAMES",
    "TRACEPARENT",
    "TRACING",
    "Message",
    "Spans",
    "Tracing",
    "TracingSettings",
    "settings_from_env",
]
