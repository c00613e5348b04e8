"""The exporter process: sampler thread + prometheus-client HTTP server on one registry.

``build_exporter`` is the composition root for this subsystem; the CLI and the tests call it
with a real :class:`KafkaOffsetReader` (tests may pass any :class:`OffsetReader`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from .collector import LagCollector
from .kafka_reader import KafkaOffsetReader
from .ports import OffsetReader, StoreGauges
from .sampler import LagSampler, SamplerConfig


@dataclass(frozen=True, kw_only=True)
class ExporterConfig:
    bootstrap: str
    port: int = 9308
    address: str = "127.0.0.1"
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


@dataclass(kw_only=True)
class Exporter:
    """A running exporter. ``stop()`` ends the sampler thread, the HTTP server and the reader."""

    sampler: LagSampler
    registry: CollectorRegistry
    port: int
    _stop: threading.Event
    _thread: threading.Thread
    _server: Any
    _reader: OffsetReader

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)
        close = getattr(self._reader, "close", None)
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
    stop = threading.Event()
    thread = threading.Thread(
        target=sampler.run_forever, args=(stop,), name="fleet-lag-sampler", daemon=True
    )
    thread.start()
    server, _ = start_http_server(config.port, addr=config.address, registry=registry)
    return Exporter(
        sampler=sampler,
        registry=registry,
        port=server.server_port,
        _stop=stop,
        _thread=thread,
        _server=server,
        _reader=reader,
    )
