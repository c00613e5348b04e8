"""The gateway's periodic duties, each one short transaction:

* **deadlines** -- a tracked send (a forward send, a SPAWN) still pending at its deadline becomes
  exactly one ``FAILED`` in the sender's own pull store (local: it needs no broker), and a
  metric (:mod:`.deadlines`, the one tracker);
* **turn expiry** -- an ASK whose turn is still waiting past its ``expiresAt`` ends the turn and
  tells the asker: one ``FAILED`` about the ASK, reason ``EXPIRED``, stage ``expiry`` (injected
  into a worker, held for a main), so no question vanishes without a word;
* **sweeper** -- held messages past ``expiresAt`` are dead-lettered ``EXPIRED`` so an abandoned
  sender cannot wedge an inbox (R-EXP-2);
* **purges** -- finished rows past their retention, per table, in small batches
  (:class:`pipeline.retention.purger.Purger`; dedupe rows only past the R-STORE-1 horizon, and
  never an unsent outbox row or an undrained held message): every table stays bounded;
* **roster cache** -- every known binding and the follower's horizon / STALE flag mirrored into
  the store for local clients (rewritten when they change, the state row at least every 2 s so
  its age shows whether the gateway itself runs);
* **first statistics** -- on PostgreSQL, ``ANALYZE`` of a table that grew past a few pages with
  no planner statistics yet (:mod:`pipeline.store.first_statistics`): a new store's hot reads
  are index reads from its first seconds, not after autovacuum's first look.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from threading import Event

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope
from pipeline.envelope.receipts import expired_msg_id, failed_receipt
from pipeline.host import dbapi, due, roster_cache
from pipeline.host.conversations import EXPIRED, Conversations
from pipeline.host.deadlines import PENDING, Deadlines, Tracked
from pipeline.host.held import HeldStore, hold_notice
from pipeline.host.outbound import Publisher
from pipeline.host.tracking import FORWARD
from pipeline.presence.model import Delivery
from pipeline.reasons import Verification
from pipeline.retention.purger import Purger
from pipeline.store import read_sessions
from pipeline.store.first_statistics import FirstStatistics
from pipeline.support.clock import now_ms

from .dead_letter_outbox import OutboxDeadLetterSink, dead_letter_held
from .entities import LocalEntities
from .injection import InjectionQueue
from .metrics import GatewayMetrics

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        held: HeldStore,
        conversations: Conversations,
        dead_letters: OutboxDeadLetterSink,
        publisher: Publisher,
        metrics: GatewayMetrics,
        max_ttl_s: float,
        roster_entries: Callable[[], Iterable[roster_cache.RosterEntry]] | None = None,
        roster_state: Callable[[], roster_cache.RosterState] | None = None,
        roster_ready: Callable[[], bool] | None = None,
        entities: LocalEntities | None = None,
        injections: InjectionQueue | None = None,
        tracked: Sequence[Tracked] = (FORWARD,),
        purger: Purger | None = None,
        on_roster_written: Callable[[], None] | None = None,
        statistics: FirstStatistics | None = None,
    ) -> None:
        self.purger = purger
        self.statistics = statistics
        # after each commit that changed the roster mirror (roster_cache.KnownBindings)
        self.on_roster_written = on_roster_written
        self.entities = entities
        self.injections = injections
        self.sessions = sessions
        self.held = held
        self.conversations = conversations
        self.dead_letters = dead_letters
        self.publisher = publisher
        self.metrics = metrics
        self.max_ttl_ms = int(max_ttl_s * 1000)
        self.roster_entries = roster_entries
        self.roster_state = roster_state
        self.roster_ready = roster_ready
        self._last_state: roster_cache.RosterState | None = None
        bind = sessions.kw.get("bind")
        # duties look first with a read (no write lock) and write only when there is work
        self.reads = read_sessions(bind) if isinstance(bind, Engine) else sessions
        # the tick's look-first, on a connection kept between ticks (dbapi.HeldReader)
        self.look = dbapi.HeldReader(bind) if isinstance(bind, Engine) else None
        self._last_roster: list[roster_cache.RosterEntry] | None = None
        self._tracked_tables = tuple(kind.table for kind in tracked)
        self.tracker = Deadlines(
            sessions=sessions,
            reads=self.reads,
            gateway_id=publisher.gateway_id,
            kinds=tracked,
            ttl_s=max_ttl_s,
            on_timeout={FORWARD.name: metrics.injected_timeouts.inc},
            injects=self._takes_injects,
            inject=self._inject_notice,
        )

    def _takes_injects(self, gid: str) -> bool:
        """A local entity that takes delivery by inject (a worker): its notices are injected,
        never held (it does not drain held rows)."""
        entity = self.entities.get(gid) if self.entities is not None else None
        return (
            self.injections is not None
            and entity is not None
            and (entity.delivery is Delivery.INJECT)
        )

    def _inject_notice(self, notice: Envelope) -> None:
        assert self.injections is not None
        self.injections.submit(notice.to, notice, reply_host=None)

    def tick(self, stop: Event | None = None) -> None:
        """Every duty that has work. One read asks the store duties first (:func:`due.due_now`):
        on an idle store the tick is that statement, the roster check and the purge's clock."""
        duties: list[Callable[[], object]] = []
        try:
            work = self._due()
        except Exception:
            log.exception("maintenance look-first failed; every duty asks itself")
            duties += (self.deadlines, self.expire_turns, self.sweep)
        else:
            if work.overdue:
                duties.append(self.deadlines)
            if work.turns:
                duties.append(self.expire_turns)
            if work.held:
                duties.append(self.sweep)
        duties += (self.refresh_roster, functools.partial(self.purge, stop))
        if self.statistics is not None and self.statistics.enabled:
            duties.append(self.first_statistics)
        for duty in duties:
            try:
                duty()
            except Exception:
                log.exception("maintenance duty %s failed", getattr(duty, "__name__", "purge"))

    def first_statistics(self) -> list[str]:
        assert self.statistics is not None
        return self.statistics.tick()

    def _due(self) -> due.Due:
        if self.look is not None:
            return due.due_now(self.look, self._tracked_tables, PENDING, now_ms())
        with self.reads() as r:
            return due.due_now(r, self._tracked_tables, PENDING, now_ms())

    def close(self) -> None:
        """Give the look-first's connection back (before the engine is disposed)."""
        if self.look is not None:
            self.look.close()

    def deadlines(self) -> int:
        """Every tracked send past its deadline (forward sends, SPAWNs): one FAILED each."""
        return self.tracker.tick()

    def expire_turns(self) -> int:
        """End every turn still waiting past its ASK's expiry, with a notice to the asker."""
        now = now_ms()
        with self.reads() as r:  # look first with a read: no write lock unless there is work
            if not due.turn_expired(r, now):
                return 0
        to_inject: list[Envelope] = []
        with self.sessions.begin() as s:
            for row in Conversations.expired_turns(s, now):
                if not Conversations.close_turn(s, row.turn_id, EXPIRED):
                    continue
                notice = failed_receipt(
                    about=row.ask_msg_id,
                    recipient=row.asked,
                    sender=self.publisher.gateway_id,
                    to=row.asker,
                    reason=Verification.EXPIRED,
                    error=f"no answer from {row.asked} before the ASK expired",
                    stage="expiry",
                    ttl_s=self.max_ttl_ms / 1000,
                    trace_id=None,
                    msg_id=expired_msg_id(row.ask_msg_id),
                    turn_id=row.turn_id,
                )
                if self._takes_injects(row.asker):
                    to_inject.append(notice)
                else:
                    hold_notice(s, notice, now)
                self.metrics.expiries.labels("turn").inc()
        for notice in to_inject:  # after the commit: the turn is closed before the asker hears
            self._inject_notice(notice)
        return len(to_inject)

    def sweep(self) -> int:
        now = now_ms()
        with self.reads() as r:
            if not due.held_expired(r, now):
                return 0
        with self.sessions.begin() as s:
            rows = self.held.expired(s, now)
            dead_letter_held(
                s,
                self.dead_letters,
                rows,
                reason=Verification.EXPIRED,
                error="held for {recipient} past expiresAt without a drain",
            )
        if rows:
            self.metrics.expiries.labels("held").inc(len(rows))
        return len(rows)

    def purge(self, stop: Event | None = None) -> None:
        """One purge pass when due (the purger paces itself: ``[retention] every_s``); ``stop``
        ends it between two batches."""
        if self.purger is not None and self.purger.due():
            self.purger.run(stop=stop)

    def refresh_roster(self, *, state_every_ms: int = 2000) -> None:
        """Mirror the roster view into the store's roster cache (what local clients resolve
        recipients from), only rows that changed after the first write. Until the roster has
        caught up (``roster_ready``) only the state row is written: a view still replaying
        the presence topic lacks remote entries, and writing it would take the previous run's
        bindings away from local senders, refused ``UNKNOWN_RECIPIENT`` until it caught up
        (R-PRES-7: a restart is not a departure)."""
        if self.roster_entries is None:
            return
        ready = self.roster_ready is None or self.roster_ready()
        entries = sorted(self.roster_entries(), key=lambda e: e.gid) if ready else self._last_roster
        state = self.roster_state() if self.roster_state is not None else None
        last = self._last_state
        state_due = state is not None and (
            last is None
            or (state.horizon_ms, state.stale, state.why) != (last.horizon_ms, last.stale, last.why)
            or state.written_ms - last.written_ms >= state_every_ms
        )
        if entries == self._last_roster and not state_due:
            return
        wrote = False
        with self.sessions.begin() as s:
            if entries is None:
                pass  # not caught up: the bindings stay as the previous run left them
            elif self._last_roster is None:  # first write: the mirror may hold a past run's rows
                roster_cache.replace_all(s, entries)
                wrote = True
            elif entries != self._last_roster:  # a heartbeat: only the rows that changed
                roster_cache.apply_changes(s, self._last_roster, entries)
                wrote = True
            if state is not None and state_due:
                roster_cache.write_state(s, state)
        if wrote and self.on_roster_written is not None:
            self.on_roster_written()  # committed: bindings kept from before are stale
        self._last_roster = entries
        if state_due:
            self._last_state = state
