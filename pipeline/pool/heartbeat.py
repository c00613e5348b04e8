"""A member's heartbeat: renews the leases of the step keys it holds and publishes its lanes.

Every ``period_s`` (at most a third of the step lease, so two missed beats still leave the lease
standing) one short transaction:

- renews each held step key (:meth:`IdempotencyStore.renew`, conditional on the attempt held):
  a step may run for minutes while the lease stays short, so a member killed -9 frees its steps
  one lease after its last beat, not one "longest step" after it;
- upserts the member's ``fleet_pool_members`` row: steps running, the oldest one's start, the
  beat time. ``fleet pool status --store-url`` reads these rows (:func:`member_lanes`), which
  works across processes and hosts because every member writes the same store.

A graceful stop keeps beating while a given-up step still runs (then the step stores its outcome
and the new owner, waiting on the key, replays it), then deletes the row; a killed member's row
goes stale (no beat for three periods).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.support import clock

from .claims import StepClaims
from .metrics import PoolMetrics
from .tables import members_table

log = logging.getLogger(__name__)

STALE_PERIODS = 3


@dataclass(frozen=True, kw_only=True)
class MemberLanes:
    """One member's published lanes, as ``fleet pool status`` shows them."""

    member: str
    running: int
    oldest_running_s: float | None
    beat_age_s: float
    stale: bool


class Heartbeat:
    """Background thread (``start``/``close``); ``beat`` is one turn, callable directly."""

    def __init__(
        self,
        *,
        claims: StepClaims | None,
        sessions: sessionmaker[Session],
        pool: str,
        member: str,
        running: Callable[[], list[int]],
        period_s: float,
        metrics: PoolMetrics | None = None,
    ) -> None:
        self.claims = claims
        self.sessions = sessions
        self.pool = pool
        self.member = member
        self.running = running
        self.period_s = period_s
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pool-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.beat()
            except SQLAlchemyError as exc:  # the store is down: the next beat tries again
                log.warning("pool heartbeat failed: %s", exc)
            if not self._stop.is_set():
                self._stop.wait(self.period_s)
            elif self._holding():
                time.sleep(self.period_s)  # stopping, but a given-up step still runs
            else:
                return

    def _holding(self) -> bool:
        """Steps given up at a revoke or a stop still run on their threads (a thread cannot be
        killed) and will store their outcome: their leases are renewed until they end, so the
        new owner waits for that outcome instead of running the step a second time."""
        return self.claims is not None and bool(self.claims.held())

    def beat(self) -> None:
        # the running steps first, then the clock: a step that starts between the two reads is
        # then never younger than the beat that reports it (its age read 4.999 s for 5)
        starts = self.running()
        now = clock.now_ms()
        row = {
            "running": len(starts),
            "oldest_started_ms": min(starts) if starts else None,
            "beat_ms": now,
            "period_ms": int(self.period_s * 1000),
        }
        if self.metrics is not None:
            oldest = (now - min(starts)) / 1000 if starts else 0.0
            self.metrics.oldest_step.labels(self.metrics.pool).set(max(0.0, oldest))
        ident = (members_table.c.pool == self.pool, members_table.c.member == self.member)
        with self.sessions.begin() as session:
            if self.claims is not None:
                self._renew(session, self.claims)
            done = session.execute(update(members_table).where(*ident).values(**row))
            if int(getattr(done, "rowcount", 0) or 0) == 0:
                session.execute(
                    insert(members_table), {"pool": self.pool, "member": self.member, **row}
                )

    def _renew(self, session: Session, claims: StepClaims) -> None:
        for held in claims.held():
            renewed = claims.store.renew(
                session, held.key, key_class=claims.key_class, attempt=held.attempt
            )
            # a step that completed (or released) its key after held() listed it is no loss
            if not renewed and claims.holds(held):
                log.warning("step key %s is no longer held: its lease was lost", held.key)
                if self.metrics is not None:
                    self.metrics.leases_lost.labels(self.metrics.pool).inc()

    def close(self) -> None:
        """Stop beating once no claimed step is left running, then remove the lanes row."""
        self._stop.set()
        if self._thread is not None:
            if self._holding():
                log.info("%s: waiting for its given-up steps to end", self.member)
            self._thread.join()
        try:
            with self.sessions.begin() as session:
                session.execute(
                    delete(members_table).where(
                        members_table.c.pool == self.pool, members_table.c.member == self.member
                    )
                )
        except SQLAlchemyError as exc:
            log.warning("could not remove the lanes row of %s: %s", self.member, exc)


def member_lanes(session: Session, pool: str, *, now_ms: int | None = None) -> list[MemberLanes]:
    """Every published member row of ``pool`` (stale ones flagged), by member name."""
    now = clock.now_ms() if now_ms is None else now_ms
    rows = session.execute(
        select(members_table).where(members_table.c.pool == pool).order_by(members_table.c.member)
    )
    return [
        MemberLanes(
            member=r.member,
            running=int(r.running),
            oldest_running_s=(
                None if r.oldest_started_ms is None else max(0, now - r.oldest_started_ms) / 1000
            ),
            beat_age_s=max(0, now - r.beat_ms) / 1000,
            stale=now - r.beat_ms > STALE_PERIODS * max(int(r.period_ms), 1),
        )
        for r in rows
    ]
