"""The exporter process: a sampler thread and an HTTP endpoint serving its last rendering.

``build_exporter`` is the composition root for this subsystem; the CLI and the tests call it
with a real :class:`KafkaOffsetReader` (tests may pass any :class:`OffsetReader`).

Rendering 10,000 group/partition rows through prometheus-client takes about a second on a busy
core (``bench/bench_exporter.py``). The metrics only change when a sample is taken, so the
sampler thread renders once per sample (plain and gzip) and a scrape just copies bytes: scrapes
stay cheap however often Prometheus (or several of them) calls.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from .collector import LagCollector
from .kafka_reader import KafkaOffsetReader
from .ports import OffsetReader, StoreGauges
from .sampler import LagSampler, SamplerConfig

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass(frozen=True, kw_only=True)
class ExporterConfig:
    bootstrap: str
    port: int = 9308
    address: str = "127.0.0.1"
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


class RenderedMetrics:
    """The registry's exposition, rendered once per sample; a WSGI app serving it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._plain = b""
        self._gzip = b""
        self.refresh()

    def refresh(self) -> None:
        plain = generate_latest(self._registry)
        packed = gzip.compress(plain, compresslevel=1)
        with self._lock:
            self._plain, self._gzip = plain, packed

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        with self._lock:
            plain, packed = self._plain, self._gzip
        headers = [("Content-Type", CONTENT_TYPE_LATEST)]
        body = plain
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            headers.append(("Content-Encoding", "gzip"))
            body = packed
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]


@dataclass(kw_only=True)
class Exporter:
    """A running exporter. ``stop()`` ends the sampler thread, the HTTP server, the reader and
    the store gauges' engines."""

    sampler: LagSampler
    registry: CollectorRegistry
    port: int
    _stop: threading.Event
    _threads: tuple[threading.Thread, ...]
    _server: Any
    _reader: OffsetReader
    _store: StoreGauges | None = None

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=30)
        for owned in (self._reader, self._store):
            close = getattr(owned, "close", None)
            if close is not None:
                close()


def build_exporter(
    config: ExporterConfig,
    *,
    reader: OffsetReader | None = None,
    store: StoreGauges | None = None,
) -> Exporter:
    """Start sampling now and serve ``/metrics`` on ``config.address:config.port``."""
    reader = reader or KafkaOffsetReader(config.bootstrap)
    sampler = LagSampler(reader, config.sampler, store=store)
    registry = CollectorRegistry()
    LagCollector(lambda: sampler.latest, lambda: sampler.cycles).register(registry)
    rendered = RenderedMetrics(registry)
    stop = threading.Event()

    def sample_loop() -> None:
        while not stop.is_set():
            sampler.sample()
            rendered.refresh()
            stop.wait(config.sampler.interval_s)

    server = make_server(
        config.address, config.port, rendered, ThreadingWSGIServer, handler_class=_SilentHandler
    )
    threads = (
        threading.Thread(target=sample_loop, name="fleet-lag-sampler", daemon=True),
        threading.Thread(target=server.serve_forever, name="fleet-exporter-http", daemon=True),
    )
    for thread in threads:
        thread.start()
    return Exporter(
        sampler=sampler,
        registry=registry,
        port=server.server_port,
        _stop=stop,
        _threads=threads,
        _server=server,
        _reader=reader,
        _store=store,
    )
