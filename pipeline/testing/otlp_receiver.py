"""A tiny OTLP/HTTP trace receiver on loopback, for tests and the bench (``BENCH_TRACING=1``).

``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, as the SDK's
``OTLPSpanExporter`` sends it) is decoded with ``opentelemetry-proto`` and its spans kept::

    receiver = OtlpReceiver().start()
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    ...                       # gateways export to it
    receiver.spans()          # every span received so far, as ReceivedSpan
    receiver.stop()

The interface (``start()``, ``endpoint``, ``spans()``, ``stop()``) is all a test uses, so a real
OpenTelemetry Collector can stand in for it as a second target. Needs the ``otel`` extra.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: ids as lowercase hex (``parent_span_id`` empty for a root)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in ("string_value", "bool_value", "int_value",
                                        "double_value") else str(v)  # fmt: skip


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out: list[ReceivedSpan] = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        service=str(resource.get("service.name", "")),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        start_ns=s.start_time_unix_nano,
                    )
                )
    return out


class OtlpReceiver:
    """See the module docstring. ``port`` 0: any free port on 127.0.0.1."""

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK appends ``/v1/traces``)."""
        if self._server is None:
            raise RuntimeError("the receiver is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    spans = decode(body)
                except Exception:  # noqa: BLE001 - a bad request is the sender's: say 400
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver._spans.extend(spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None  # quiet: a test's output is its assertions

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def tree(spans: list[ReceivedSpan]) -> str:
    """One trace's spans as an indented tree, children under parents in start order:
    ``name  [service]  span id  (attribute fleet.kind / outcome)``; a span whose parent was
    not received is shown at the top level."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[ReceivedSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        parent = s.parent_span_id if s.parent_span_id in ids else ""
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            what = " ".join(
                f"{k.split('.')[-1]}={s.attributes[k]}"
                for k in ("fleet.kind", "fleet.inject.outcome")
                if k in s.attributes
            )
            lines.append(
                f"{'  ' * depth}{s.name:<{max(1, 28 - 2 * depth)}} [{s.service}] {s.span_id} {what}"
            )
            walk(s.span_id, depth + 1)

    walk("", 0)
    return "\n".join(line.rstrip() for line in lines)
