"""The gateway's supervised loop bodies: presence, relay, inbox and maintenance.

The composition root (:mod:`pipeline.bootstrap.gateway`) builds the parts and hands them to
these functions through :class:`~pipeline.gateway.service.Supervised`; each runs until ``stop``.
The order they keep is the start-up order of docs/gateway.md: presence announced first, the relay
ships once it is on the broker, the inbox runs once the roster caught up.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from pipeline.control.handler import SpawnHandler
from pipeline.envelope.ed25519 import VERIFIER
from pipeline.errors import FencedError
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.incarnation import take_incarnation
from pipeline.host.roster_cache import RosterEntry, RosterState
from pipeline.observability.thread_cpu import name_os_threads
from pipeline.outbox import Relay
from pipeline.presence import PresencePublisher, RosterFollower, RosterView
from pipeline.runtime import ConsumerRuntime
from pipeline.support.clock import now_ms

from .injection import InjectionQueue
from .maintenance import Maintenance
from .service import Gateway

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

PRESENCE_FIRST_FLUSH_S = 10.0  # bounded: a broker that is down delays nothing further


def stop_presence(presence: PresencePublisher, gateway: Gateway, away_grace_s: float) -> None:
    """A stop is not a departure: the entities are announced away for ``away_grace_s``
    (docs/presence.md "Away"; 0: tombstoned). Fenced: another gateway now speaks for this host;
    its presence is not ours to retract nor to announce away."""
    fenced = isinstance(gateway.fatal, FencedError)
    presence.stop(retract=not fenced, away_grace_s=away_grace_s)


def roster_caught_up(follower: RosterFollower, stop: Any) -> bool:
    """Wait for the roster's first catch-up; False when the gateway stops first."""
    while not follower.caught_up.wait(0.2):
        if stop.is_set():
            return False
    return True


def run_presence(
    config: GatewayConfig,
    presence: PresencePublisher,
    follower: RosterFollower,
    sessions: sessionmaker[Session],
    announced: threading.Event,
    stop: Any,
) -> None:
    """The presence loop: announce the configured entities at once and heartbeat; every interval,
    take a new incarnation if the roster holds a higher one of this host (a twin with this host
    id, or a wiped store that started below its previous run: docs/presence.md "Order").
    Announcing does not wait for the roster to catch up: a restarted host's entities read as
    departed (its clean stop's tombstones) until it announces them, so every second of waiting
    refused sends to them ``UNKNOWN_RECIPIENT``. ``announced`` is set once the first heartbeats
    are on the broker (see :func:`run_relay`)."""
    for e in config.entities:
        presence.register(e.gid, role=e.role, delivery=e.delivery, groups=e.groups)
    presence.start()
    presence.flush(PRESENCE_FIRST_FLUSH_S)  # on the broker before the relay ships a backlog
    announced.set()
    host = config.host
    while not stop.wait(config.presence_interval_s):
        presence.outranked(
            follower.view.incarnation_of(host),
            lambda seen: take_incarnation(sessions, host, seen=seen),
        )


def run_relay(relay: Relay, announced: threading.Event, stop: Any) -> None:
    """The relay ships only once this host's presence is announced: a restarted gateway's
    backlog reaching a peer before the presence that binds its senders would be dead-lettered
    there ``UNKNOWN_SENDER`` (its entities read as departed since the clean stop's tombstones).
    Sends are accepted meanwhile; they wait in the outbox, as during an outage."""
    while not announced.wait(0.2):
        if stop.is_set():
            return
    relay.run_forever(stop)


def run_inbox(
    follower: RosterFollower,
    spawn_handler: SpawnHandler,
    maintenance: Maintenance,
    injections: InjectionQueue,
    runtime: ConsumerRuntime,
    stop: Any,
) -> None:
    """The inbox: verification needs the roster's bindings, so it starts once the roster caught
    up (the roster loop waits out transient broker errors meanwhile). Before it runs, live
    workers are re-adopted, the roster cache written, and every inject a crash left unrecorded
    reported (the inject journal)."""
    if not roster_caught_up(follower, stop):
        return
    # where a restart's time goes (bench_restart); and which library verifies (docs/envelope.md)
    log.info("inbox: roster caught up, consuming (Ed25519 verify: %s)", VERIFIER)
    spawn_handler.relive()
    maintenance.refresh_roster()
    injections.report_uncertain()
    runtime.run(stop)


def run_maintenance(
    maintenance: Maintenance, spawn_handler: SpawnHandler, interval_s: float, stop: Any
) -> None:
    """The maintenance ticker: sweeps, roster cache, purges; and reaps workers whose process
    died (docs/lifecycle.md). Each tick also names the gateway's new threads in the kernel
    (``top -H``, ``perf``: docs/observability.md)."""
    name_os_threads()
    while not stop.wait(min(interval_s, 0.5)):
        name_os_threads()
        maintenance.tick(stop)  # a stop ends a purge pass between two batches
        try:
            spawn_handler.sweep()
        except Exception:
            log.exception("maintenance duty spawn_handler.sweep failed")


def roster_rows(roster: RosterView) -> list[RosterEntry]:
    """The roster view as the roster cache's rows: live and stale entries, then departures."""
    return [
        RosterEntry(
            e.gid, e.host, e.role.value, e.delivery.value, tuple(e.groups), e.ts_ms + e.ttl_ms
        )
        for e in roster.entries(include_stale=True)
    ] + [
        RosterEntry(e.gid, e.host, e.role.value, e.delivery.value, (), 0, str(e.gone))
        for e in roster.departures()
    ]


def roster_state(roster: RosterView) -> RosterState:
    """The roster's freshness as the roster cache's state row."""
    freshness = roster.freshness()
    return RosterState(freshness.horizon_ms, freshness.stale, freshness.why, now_ms())
