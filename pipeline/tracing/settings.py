"""When tracing is on: the standard ``OTEL_*`` variables, read by the entry point and handed in.

The rule (docs/observability.md, "Turning it on"):

* ``OTEL_SDK_DISABLED=true`` -> off, whatever else is set;
* ``OTEL_TRACES_EXPORTER`` set: ``otlp`` -> on, OTLP over HTTP/protobuf; ``console`` -> on,
  spans printed to stdout; ``none`` (or anything else) -> off;
* ``OTEL_TRACES_EXPORTER`` unset -> on (``otlp``) exactly when ``OTEL_EXPORTER_OTLP_ENDPOINT``
  or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; off otherwise (the default).

Everything else (endpoint, headers, timeouts, sampler, batch delays, resource attributes) is the
SDK's own reading of the same variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Exporter = Literal["otlp", "console"]


@dataclass(frozen=True, kw_only=True)
class TracingSettings:
    """``exporter``: where spans go; ``None``: tracing off."""

    exporter: Exporter | None = None

    @property
    def on(self) -> bool:
        return self.exporter is not None


OFF = TracingSettings()


def settings_from_env(environ: Mapping[str, str]) -> TracingSettings:
    """The rule of the module docstring, applied to ``environ``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return OFF
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        chosen = {x.strip() for x in named.split(",")}
        if "otlp" in chosen:
            return TracingSettings(exporter="otlp")
        if "console" in chosen:
            return TracingSettings(exporter="console")
        return OFF
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return TracingSettings(exporter="otlp") if endpoint else OFF
