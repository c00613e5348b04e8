"""A real OpenTelemetry Collector on loopback, for tests that assert what a tracing UI would see.

The binary is `tools/otelcol` (the core OTLP receiver and the contrib file exporter), built by
`scripts/build-otelcol.sh` into the virtualenv. The collector listens for OTLP/HTTP on a free
loopback port and writes every export it receives as one OTLP JSON line; :meth:`spans` reads
them back as the same :class:`~pipeline.testing.otlp_receiver.ReceivedSpan` the loopback
receiver gives, with the same interface (``start()``, ``endpoint``, ``spans()``, ``stop()``), so
a test runs against either: :func:`trace_target` picks the collector when it is built.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.testing.otlp_receiver import OtlpReceiver, ReceivedSpan

BINARY_ENV = "FLEET_OTELCOL"
BINARY_NAME = "fleet-otelcol"


def find_binary() -> Path | None:
    """``$FLEET_OTELCOL``, else ``fleet-otelcol`` beside this interpreter, else on ``PATH``."""
    named = os.environ.get(BINARY_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    beside = Path(sys.executable).parent / BINARY_NAME
    if beside.is_file():
        return beside
    found = shutil.which(BINARY_NAME)
    return Path(found) if found else None


def _config(port: int, out: Path) -> str:
    return "\n".join(
        [
            "receivers:",
            "  otlp:",
            "    protocols:",
            "      http:",
            f"        endpoint: 127.0.0.1:{port}",
            "exporters:",
            "  file:",
            f"    path: {out}",
            "    flush_interval: 50ms",
            "service:",
            "  telemetry:",
            "    metrics:",
            "      level: none",
            "  pipelines:",
            "    traces:",
            "      receivers: [otlp]",
            "      exporters: [file]",
            "",
        ]
    )


def _value(v: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _attributes(items: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value", {})) for a in items}


def parse_otlp_json(line: str) -> Iterator[ReceivedSpan]:
    """The spans of one OTLP/JSON ``ExportTraceServiceRequest`` (the file exporter's line)."""
    for resource_spans in json.loads(line).get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                yield ReceivedSpan(
                    trace_id=span.get("traceId", "").lower(),
                    span_id=span.get("spanId", "").lower(),
                    parent_span_id=span.get("parentSpanId", "").lower(),
                    name=span.get("name", ""),
                    service=service,
                    attributes=_attributes(span.get("attributes", [])),
                    start_ns=int(span.get("startTimeUnixNano", 0)),
                )


class OtelCollector:
    """Runs the collector binary until :meth:`stop`; ``endpoint`` is for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

    def __init__(self, binary: Path | None = None) -> None:
        found = binary or find_binary()
        if found is None:
            raise FileNotFoundError(
                f"no {BINARY_NAME}: build it with scripts/build-otelcol.sh (needs Go) "
                f"or name it in ${BINARY_ENV}"
            )
        self.binary = found
        self._dir = Path(tempfile.mkdtemp(prefix="fleet-otelcol-"))
        self._out = self._dir / "spans.jsonl"
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = 30.0) -> OtelCollector:
        from pipeline.kafka.local.ports import free_ports
        from pipeline.support.waiting import wait_until

        self.port = free_ports(1)[0]
        config = self._dir / "config.yaml"
        config.write_text(_config(self.port, self._out))
        log = (self._dir / "collector.log").open("wb")
        self._process = subprocess.Popen(
            [str(self.binary), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        wait_until(self._ready, timeout_s=timeout_s, what="the OpenTelemetry Collector to listen")
        return self

    def _ready(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"the collector exited: {self.log()[-2000:]}")
        return "Everything is ready" in self.log()

    def log(self) -> str:
        path = self._dir / "collector.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far (the file exporter flushes every 50 ms). Only whole lines
        are read: the exporter may be half-way through writing the last one."""
        if not self._out.exists():
            return []
        text = self._out.read_text()
        out: list[ReceivedSpan] = []
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line.strip():
                out.extend(parse_otlp_json(line))
        return out

    def stop(self) -> None:
        """Ends the collector and removes its folder (config, log and the spans file)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> OtelCollector:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def wait_for_spans(
    collector: OtelCollector, predicate: Any, *, timeout_s: float = 30.0
) -> list[ReceivedSpan]:
    """Polls :meth:`OtelCollector.spans` until ``predicate(spans)`` holds; returns them."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = collector.spans()
        if predicate(spans) or time.monotonic() >= deadline:
            return spans
        time.sleep(0.1)


def trace_target() -> OtelCollector | OtlpReceiver:
    """Where a test's gateways export: the real collector when it is built (CI builds it in
    ``make setup``), else the loopback receiver. Not started."""
    return OtelCollector() if find_binary() is not None else OtlpReceiver()
