"""``/healthz`` and ``/readyz`` beside ``/metrics``: what a supervisor or a load balancer asks.

* ``/healthz`` -- the process is alive: it answers, and no fatal error is stopping it. A 503
  here means restart me (a fenced gateway exits 3 on its own: docs/gateway.md "Fencing").
* ``/readyz`` -- the process does its job now: every named check passes. For a gateway
  (:func:`gateway_health`): ``group`` (its inbox group joined: a partition assigned), ``roster``
  (the roster caught up once: verification has the bindings it needs), ``store`` (a write
  transaction can be opened and written in, then rolled back) and ``running`` (no stop begun).

Both answer JSON: ``{"ready": false, "checks": {"group": "ok", "store": "why not"}}``, status
200 or 503. A check that raises fails with the exception's text. Anything else is ``/metrics``
(the Prometheus exposition of the process's registry). The one server is started by
:func:`serve`; ``fleet gateway run`` also tells systemd ``READY=1`` once ``/readyz`` would answer
200 (:mod:`pipeline.support.sd_notify`). docs/observability.md "Health and readiness".
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler
from sqlalchemy import text

from pipeline.store.version import VERSION_TABLE
from pipeline.support import sd_notify

if TYPE_CHECKING:  # types only
    from sqlalchemy import Engine

    from pipeline.presence import RosterView
    from pipeline.runtime import ConsumerRuntime

Check = Callable[[], str | None]
"""A probe: None when it passes, else a short reason why not."""

OK = "ok"
HEALTHZ = "/healthz"
READYZ = "/readyz"
READY_POLL_S = 0.5


@dataclass(frozen=True)
class Health:
    """The checks behind ``/healthz`` (``alive``) and ``/readyz`` (``ready``), by name."""

    alive: Mapping[str, Check] = field(default_factory=dict)
    ready: Mapping[str, Check] = field(default_factory=dict)

    def liveness(self) -> tuple[bool, dict[str, str]]:
        return _run(self.alive)

    def readiness(self) -> tuple[bool, dict[str, str]]:
        """Liveness first (a dying process is not ready), then every readiness check."""
        return _run({**self.alive, **self.ready})


def _run(checks: Mapping[str, Check]) -> tuple[bool, dict[str, str]]:
    results: dict[str, str] = {}
    for name, check in checks.items():
        try:
            why = check()
        except Exception as exc:  # noqa: BLE001 - a probe that raises is a failed probe
            why = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        results[name] = OK if why is None else why
    return all(v == OK for v in results.values()), results


def group_joined(runtime: ConsumerRuntime) -> Check:
    """Passes once the runtime's consumer holds a partition of its group (the inbox and the
    control topic: a gateway is alone in its group, static member ``host``)."""

    def check() -> str | None:
        if runtime.rebalance.assigned:
            return None
        return f"group {runtime.config.group_id} not joined yet (no partition assigned)"

    return check


def roster_caught_up(roster: RosterView) -> Check:
    """Passes once the roster follower read the roster to its end at least once."""

    def check() -> str | None:
        if roster.freshness().horizon_ms is not None:
            return None
        return "roster catching up (not read to its end yet)"

    return check


def store_writable(engine: Engine) -> Check:
    """Passes when a write transaction opens and a write runs in it (an UPDATE of no row of
    the schema-version table, rolled back): a read-only file, a read-only replica or a server
    that refuses connections all fail it. On SQLite it queues behind the process's writers
    like any write (``pipeline.store.serialize_writes``)."""
    probe = text(f"UPDATE {VERSION_TABLE} SET version_num = version_num WHERE 1 = 0")

    def check() -> str | None:
        with engine.connect() as conn:
            tx = conn.begin()
            try:
                conn.execute(probe)
            finally:
                tx.rollback()
        return None

    return check


def gateway_health(
    *,
    stop: threading.Event,
    fatal: Callable[[], BaseException | None],
    runtime: ConsumerRuntime,
    roster: RosterView,
    engine: Engine,
) -> Health:
    """A gateway's checks: alive while no fatal error; ready when its group is joined, its
    roster caught up, its store writable and no stop has begun."""

    def alive() -> str | None:
        exc = fatal()
        return None if exc is None else f"fatal: {exc}"

    def running() -> str | None:
        return "stopping" if stop.is_set() else None

    return Health(
        alive={"alive": alive},
        ready={
            "running": running,
            "group": group_joined(runtime),
            "roster": roster_caught_up(roster),
            "store": store_writable(engine),
        },
    )


def notify_when_ready(
    health: Health,
    stop: threading.Event,
    *,
    status: str = "",
    environ: Mapping[str, str] | None = None,
    poll_s: float = READY_POLL_S,
) -> threading.Thread | None:
    """Under a service manager (``$NOTIFY_SOCKET`` set), tell it ``READY=1`` once
    :meth:`Health.readiness` passes, from a daemon thread that polls every ``poll_s`` until then
    or until ``stop``; None (no thread) when there is no one to tell."""
    if sd_notify.notify_address(environ) is None:
        return None

    def wait_then_notify() -> None:
        while not stop.is_set():
            if health.readiness()[0]:
                sd_notify.ready(status, environ=environ)
                return
            stop.wait(poll_s)

    thread = threading.Thread(target=wait_then_notify, name="sd-notify-ready", daemon=True)
    thread.start()
    return thread


def _handler(registry: CollectorRegistry, health: Health) -> type[MetricsHandler]:
    class Handler(MetricsHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            path = urlparse(self.path).path
            if path == HEALTHZ:
                self._answer(*health.liveness())
            elif path == READYZ:
                self._answer(*health.readiness())
            else:
                super().do_GET()

        def _answer(self, ok: bool, checks: dict[str, str]) -> None:
            word = "ready" if urlparse(self.path).path == READYZ else "alive"
            body = json.dumps({word: ok, "checks": checks}, sort_keys=True).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    Handler.registry = registry
    return Handler


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True


def serve(
    registry: CollectorRegistry, *, port: int, address: str, health: Health | None = None
) -> HealthServer:
    """Serve ``/metrics`` (``registry``), ``/healthz`` and ``/readyz`` (``health``; none given:
    alive, and ready with no check) on ``address:port`` from a daemon thread. Raises OSError
    for a port in use or an address that does not resolve."""
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    server_class: Any = type("HealthServer", (HealthServer,), {"address_family": family})
    server: HealthServer = server_class((address, port), _handler(registry, health or Health()))
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
