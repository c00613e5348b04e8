"""Injection instruments, and a wrapper that feeds them around any ``Injector``."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from pipeline.errors import InjectError

from .port import INJECT_REASONS, Injector

INJECTOR_LABELS = ("callback", "command", "tmux", "other")
OTHER = "OTHER"  # any reason outside INJECT_REASONS: keeps the label set closed
# From an in-process callback (sub-millisecond) up to a command that hits its timeout.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class InjectMetrics:
    """``fleet_gateway_inject_seconds`` (landed injects) and
    ``fleet_gateway_inject_failures_total`` by injector type and reason (a closed set)."""

    def __init__(self, registry: CollectorRegistry, *, namespace: str = "fleet") -> None:
        self.seconds = Histogram(
            "gateway_inject_seconds",
            "Time to land one brief in a local entity (successful injects only).",
            ["injector"],
            namespace=namespace,
            registry=registry,
            buckets=BUCKETS,
        )
        self.failures = Counter(
            "gateway_inject_failures_total",
            "Injects that did not land, by reason (TARGET_BUSY is retriable, the rest final).",
            ["injector", "reason"],
            namespace=namespace,
            registry=registry,
        )
        for injector in INJECTOR_LABELS:  # export zeros so rate() and alerts see every series
            self.seconds.labels(injector)
            for reason in (*INJECT_REASONS, OTHER):
                self.failures.labels(injector, reason)

    def observe(self, injector: str, seconds: float) -> None:
        self.seconds.labels(_injector_label(injector)).observe(seconds)

    def failed(self, injector: str, reason: str) -> None:
        label = reason if reason in INJECT_REASONS else OTHER
        self.failures.labels(_injector_label(injector), label).inc()


class MeteredInjector:
    """Times and counts every call of ``inner``; behaviour is otherwise unchanged."""

    def __init__(
        self,
        inner: Injector,
        metrics: InjectMetrics,
        *,
        injector: str,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.inner = inner
        self.metrics = metrics
        self.injector = _injector_label(injector)
        self.clock = clock
        self._seconds = metrics.seconds.labels(self.injector)  # resolve the child once

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        start = self.clock()
        try:
            self.inner.inject(
                gid=gid, msg_id=msg_id, kind=kind, sender=sender, body=body, trace_id=trace_id
            )
        except InjectError as exc:
            self.metrics.failed(self.injector, exc.reason)
            raise
        except Exception:
            self.metrics.failed(self.injector, OTHER)
            raise
        self._seconds.observe(self.clock() - start)

    def __repr__(self) -> str:
        return f"MeteredInjector({self.inner!r})"


def _injector_label(injector: str) -> str:
    return injector if injector in INJECTOR_LABELS else "other"
