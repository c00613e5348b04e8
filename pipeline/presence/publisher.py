"""Heartbeats this host's presence (R-PRES-1); on stop announces it away, or tombstones it.

Every local gid gets a signed record on the roster each ``interval_s``, and so does the host
entry ``<host>._gateway`` with the spawn profiles. ``ttl_s`` should be about three intervals so
one lost heartbeat does not make an agent vanish.

While the broker is away every heartbeat fails (``_MSG_TIMED_OUT``): that is one warning when
delivery starts failing and one line when it recovers (plus
``fleet_presence_heartbeat_failures_total`` and the ``fleet_presence_publisher_failing`` gauge),
never a line per heartbeat.

Every record carries this gateway's **incarnation** (docs/presence.md "Order"): given as a
number, or as a callable asked once, just before the first record is built (the gateway's takes
the next value from its store, above what the caught-up roster has seen of this host).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pipeline.envelope import Signer
from pipeline.errors import DeliveryError
from pipeline.kafka.topics import TopicNames
from pipeline.support.clock import now_ms

from .metrics import PresenceMetrics
from .model import (
    GATEWAY_TAKES,
    Delivery,
    Gone,
    PresenceEntry,
    Role,
    SpawnProfile,
    gateway_gid,
    presence_record,
    tombstone_record,
)

log = logging.getLogger(__name__)


class ProducerLike(Protocol):
    def produce(self, topic: str, **kwargs: Any) -> None: ...
    def flush(self, timeout: float) -> int: ...
    def poll(self, timeout: float) -> int: ...


class PresencePublisher:
    """Signed heartbeats for the local agents and the host entry; tombstones on stop."""

    def __init__(
        self,
        *,
        producer: ProducerLike,
        signer: Signer,
        topics: TopicNames = TopicNames(),
        profiles: Iterable[SpawnProfile] = (),
        interval_s: float = 10.0,
        ttl_s: float = 30.0,
        clock_ms: Callable[[], int] = now_ms,
        metrics: PresenceMetrics | None = None,
        agreement_key: bytes | None = None,
        incarnation: int | Callable[[], int] = 0,
    ) -> None:
        self._producer = producer
        # the X25519 public key the host entry publishes (the pairwise MAC mode); None: off
        self._agreement_key = agreement_key
        self._take_incarnation = incarnation
        self._incarnation: int | None = incarnation if isinstance(incarnation, int) else None
        self._incarnation_lock = threading.Lock()
        self._metrics = metrics
        self._failing_since: int | None = None  # wall ms of the first failure of this episode
        self._signer = signer
        self._topics = topics
        self._profiles = tuple(profiles)
        self._interval_s = interval_s
        self._ttl_ms = round(ttl_s * 1000)
        self._clock = clock_ms
        self._local: dict[str, tuple[Role, Delivery, tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.delivery_errors = 0
        self._unreported = 0  # heartbeat records produced whose delivery report has not come
        self._unreported_lock = threading.Lock()  # its own: reports come from poll and flush

    @property
    def host(self) -> str:
        return self._signer.host

    @property
    def incarnation(self) -> int:
        """This run's incarnation, taken on first use (a callable is asked once)."""
        with self._incarnation_lock:
            if self._incarnation is None:
                take = self._take_incarnation
                assert callable(take)
                self._incarnation = take()
                log.info("presence: %s runs as incarnation %d", self.host, self._incarnation)
                if self._metrics is not None:
                    self._metrics.incarnation.set(self._incarnation)
            return self._incarnation

    def outranked(self, seen: int, take: Callable[[int], int]) -> bool:
        """``seen``: the highest incarnation of this host the roster holds. Above ours, another
        gateway with this host id started after we took ours (a twin: Kafka fences one of the
        two, and the survivor must not stay outranked by the other's last records), so take a
        new one with ``take(seen)``; the next heartbeat carries it. True when it did."""
        if seen <= self.incarnation:
            return False
        with self._incarnation_lock:
            old, self._incarnation = self._incarnation, take(seen)
            if self._metrics is not None:
                self._metrics.incarnation.set(self._incarnation)
        log.warning(
            "presence: another gateway with host id %s wrote incarnation %d (ours %s): "
            "now incarnation %d",
            self.host,
            seen,
            old,
            self._incarnation,
        )
        return True

    def register(self, gid: str, *, role: str, delivery: str, groups: Iterable[str] = ()) -> None:
        """``role`` / ``delivery`` by value, so the gateway config's enums fit as they are."""
        role, delivery = Role(role), Delivery(delivery)
        with self._lock:
            self._local[gid] = (role, delivery, tuple(groups))
        self._send(self._entry(gid, role, delivery, tuple(groups)), on_delivery=self._on_delivery)

    def unregister(self, gid: str, *, gone: Gone | None = None) -> None:
        """Stop heartbeating ``gid`` and tombstone it. Under the lock a heartbeat uses too, so
        no heartbeat of ``gid`` can be produced after its tombstone (it would revive the entry
        until its TTL ran out).

        With ``gone`` (a reaped worker), a *departure* record carrying the cause is produced
        just before the tombstone, on the same key and partition: a roster that reads it keeps
        the cause, so a later send is refused ``RECIPIENT_GONE`` rather than
        ``UNKNOWN_RECIPIENT``."""
        with self._lock:
            spec = self._local.pop(gid, None)
            if gone is not None:
                role, delivery, groups = spec or (Role.WORKER, Delivery.INJECT, ())
                entry = self._entry(gid, role, delivery, groups)
                self._send(dataclasses.replace(entry, gone=gone), on_delivery=self._on_delivery)
            self._tombstone(gid)

    def _entry(
        self, gid: str, role: Role, delivery: Delivery, groups: tuple[str, ...]
    ) -> PresenceEntry:
        return PresenceEntry(
            gid=gid,
            host=self.host,
            role=role,
            delivery=delivery,
            groups=groups,
            ts_ms=self._clock(),
            ttl_ms=self._ttl_ms,
            profiles=self._profiles if role is Role.GATEWAY else (),
            agreement_key=self._agreement_key if role is Role.GATEWAY else None,
            incarnation=self.incarnation,
            takes=GATEWAY_TAKES if role is Role.GATEWAY else frozenset(),
        )

    def heartbeat(self) -> int:
        """Publish every local entry plus the host entry now; returns how many were sent.

        While the last round is still undelivered and deliveries are failing (the broker is
        away), no new round is queued behind it: the roster keeps only the newest record per
        gid, and a backlog of one round per interval, delivered at once when the broker comes
        back, left followers behind the log end -- STALE again right after an outage, on a
        loaded host (hundreds of heartbeats after a 60 s outage at a 0.25 s interval)."""
        self._producer.poll(0)
        with self._lock:  # produce() only enqueues: holding the lock orders us with tombstones
            with self._unreported_lock:
                backlog = self._unreported
            if backlog and self._failing_since is not None:
                return 0
            entries = [self._entry(gateway_gid(self.host), Role.GATEWAY, Delivery.NONE, ())]
            entries += [self._entry(gid, *spec) for gid, spec in self._local.items()]
            with self._unreported_lock:  # before produce(): a flush may report at once
                self._unreported += len(entries)
            for e in entries:
                self._send(e, on_delivery=self._on_heartbeat_delivery)
        self._producer.poll(0)
        return len(entries)

    def _on_heartbeat_delivery(self, err: Any, msg: Any) -> None:
        with self._unreported_lock:
            self._unreported -= 1
        self._on_delivery(err, msg)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            if self._failing_since is not None:
                log.info(
                    "presence: heartbeats delivered again after %.0f s (%d undelivered so far)",
                    (self._clock() - self._failing_since) / 1000,
                    self.delivery_errors,
                )
                self._failing_since = None
                if self._metrics is not None:
                    self._metrics.publisher_failing.set(0)
            return
        self.delivery_errors += 1
        if self._metrics is not None:
            self._metrics.heartbeat_failures.inc()
        if self._failing_since is None:
            self._failing_since = self._clock()
            if self._metrics is not None:
                self._metrics.publisher_failing.set(1)
            log.warning(
                "presence: heartbeats not delivered (%s); retrying every %.0f s, quiet until "
                "one is delivered again",
                err,
                self._interval_s,
            )

    def _send(self, entry: PresenceEntry, *, on_delivery: Callable[[Any, Any], None]) -> None:
        key, headers, value = presence_record(entry, signer=self._signer, topics=self._topics)
        self._producer.produce(
            self._topics.roster,
            key=key,
            value=value,
            headers=headers,
            on_delivery=on_delivery,
        )

    def _tombstone(self, gid: str) -> None:
        key, headers, _ = tombstone_record(
            gid, signer=self._signer, ts_ms=self._clock(), topics=self._topics
        )
        self._producer.produce(
            self._topics.roster, key=key, value=None, headers=headers, on_delivery=self._on_delivery
        )

    def start(self) -> PresencePublisher:
        self.heartbeat()
        self._thread = threading.Thread(target=self._run, name="presence-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.heartbeat()

    def flush(self, timeout_s: float) -> bool:
        """Wait (bounded) until every record produced so far is on the broker."""
        return not self._producer.flush(timeout_s)

    def stop(
        self, *, timeout_s: float = 10.0, retract: bool = True, away_grace_s: float = 0.0
    ) -> None:
        """Stop heartbeating; announce every local entry and the host entry *away*, or retract
        them with tombstones.

        ``away_grace_s > 0`` (a SIGTERM stop: a restart, not a departure; docs/presence.md
        "Away"): each entry gets one last signed record saying when it left, live for the grace,
        so peers keep accepting sends to it (they wait in its inbox topic); past the grace it
        lapses as a crashed host's would. ``0``: tombstones (``fleet gateway leave``).

        ``retract=False`` stops heartbeating only: a gateway fenced by another with the same host
        id no longer speaks for the host, and its tombstones would retract the entries the one
        that fenced it keeps announcing (they would read as departed until its next heartbeat)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        with self._lock:
            local = dict(self._local) if retract else {}
            self._local.clear()
            if retract and away_grace_s > 0:
                self._announce_away(local, away_grace_s)
            elif retract:
                for gid in [*local, gateway_gid(self.host)]:
                    self._tombstone(gid)
        left = self._producer.flush(timeout_s)
        if left:
            raise DeliveryError(f"{left} presence records not delivered on stop", retriable=True)

    def _announce_away(
        self, local: dict[str, tuple[Role, Delivery, tuple[str, ...]]], grace_s: float
    ) -> None:
        """One away record per entry (under the lock): ttl = the grace, signed time it left."""
        left_ms = self._clock()
        specs = [(gateway_gid(self.host), (Role.GATEWAY, Delivery.NONE, ())), *local.items()]
        for gid, (role, delivery, groups) in specs:
            entry = self._entry(gid, role, delivery, groups)
            away = dataclasses.replace(
                entry, ts_ms=left_ms, ttl_ms=round(grace_s * 1000), away_since_ms=left_ms
            )
            self._send(away, on_delivery=self._on_delivery)
        log.info(
            "presence: %d entries of %s announced away (grace %.0f s)",
            len(specs),
            self.host,
            grace_s,
        )
