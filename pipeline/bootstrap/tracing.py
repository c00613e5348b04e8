"""Tracing's composition: the OpenTelemetry SDK's provider, exporter and resource, installed
into the seam (:data:`pipeline.tracing.TRACING`) when the settings say so.

The SDK is imported here and only here, and only when tracing is on: a gateway with tracing off
never loads it (tests/unit/test_tracing_off.py). The resource's ``service.name`` is the
gateway's host id, ``service.namespace`` is ``fleet``; ``OTEL_RESOURCE_ATTRIBUTES`` adds more (the
SDK reads it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.tracing import TRACING, TracingSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

INSTRUMENTATION = "pipeline"


def _nothing() -> None:
    return None


def install_tracing(
    settings: TracingSettings, *, host: str, exporter: SpanExporter | None = None
) -> Callable[[], None]:
    """Turn the seam on per ``settings`` for gateway ``host``; returns the call that flushes the
    exporter and turns it off again (the gateway's stop runs it). ``exporter``: a test's own
    (an ``InMemorySpanExporter``), exported synchronously. Tracing asked for without the
    ``otel`` extra installed is logged and stays off (the gateway runs as without it)."""
    if not settings.on and exporter is None:
        return _nothing
    try:
        provider = build_provider(settings, host=host, exporter=exporter)
    except ImportError as exc:
        log.warning(
            "tracing: OTEL_* asks for traces but the OpenTelemetry SDK is not installed "
            "(pip install 'fleet-pipeline[otel]'): tracing stays off (%s)", exc,
        )  # fmt: skip
        return _nothing
    from pipeline.tracing.spans import OtelSpans

    TRACING.install(OtelSpans(provider.get_tracer(INSTRUMENTATION), host=host))

    def shutdown() -> None:
        TRACING.install(None)
        provider.shutdown()  # flushes the batch processor: the last spans are exported

    return shutdown


def build_provider(
    settings: TracingSettings, *, host: str, exporter: SpanExporter | None = None
) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from pipeline.tracing.ids import FORCED

    class EnvelopeTraceIds(RandomIdGenerator):
        """A root span takes the envelope's ``traceId`` (set by the seam), else a random id."""

        def generate_trace_id(self) -> int:
            forced = FORCED.value
            return forced if forced is not None else super().generate_trace_id()

    resource = Resource.create({"service.name": host, "service.namespace": "fleet"})
    provider = TracerProvider(resource=resource, id_generator=EnvelopeTraceIds())
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
