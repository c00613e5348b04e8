"""The gateway's periodic duties, each one short transaction:

* **deadlines** -- a forward send still pending at its deadline becomes exactly one ``FAILED`` in
  the sender's own pull store (local: it needs no broker), and a metric;
* **sweeper** -- held messages past ``expiresAt`` are dead-lettered ``EXPIRED`` so an abandoned
  sender cannot wedge an inbox (seed 000 §10.1);
* **purges** -- dedupe rows older than the longest redelivery window, drained held rows, stale
  waiters: every table stays bounded;
* **roster cache** -- the live roster mirrored into the store for local clients.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope, Kind
from pipeline.failures.context import FailureContext
from pipeline.outbox.headers import unpack_headers
from pipeline.reasons import Inject, Verification
from pipeline.runtime import Record, Staged
from pipeline.runtime.dedupe import purge_older_than
from pipeline.store import read_sessions

from . import roster_cache, tracking
from .conversations import Conversations
from .deadletters import OutboxDeadLetterSink
from .held import HeldStore, held_table
from .metrics import GatewayMetrics
from .outbound import Publisher
from .receipts import failed_body

log = logging.getLogger(__name__)

DAY_MS = 86_400_000


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
    ) -> None:
        self.sessions = sessions
        self.held = held
        self.conversations = conversations
        self.dead_letters = dead_letters
        self.publisher = publisher
        self.metrics = metrics
        self.max_ttl_ms = int(max_ttl_s * 1000)
        self.roster_entries = roster_entries
        bind = sessions.kw.get("bind")
        # duties look first with a read (no write lock) and write only when there is work
        self.reads = read_sessions(bind) if isinstance(bind, Engine) else sessions
        self._last_roster: list[roster_cache.RosterEntry] | None = None
        self._next_purge = 0.0

    def tick(self) -> None:
        for duty in (self.deadlines, self.sweep, self.refresh_roster, self.purge):
            try:
                duty()
            except Exception:
                log.exception("maintenance duty %s failed", duty.__name__)

    def deadlines(self) -> int:
        now = int(time.time() * 1000)
        with self.reads() as r:
            if not tracking.overdue(r, now, limit=1):
                return 0
        with self.sessions.begin() as s:
            due = tracking.overdue(s, now)
            for row in due:
                if not tracking.settle(s, row.msg_id, tracking.FAILED, Inject.INJECT_TIMEOUT):
                    continue
                failed = Envelope.new(
                    kind=Kind.FAILED,
                    sender=self.publisher.gateway_id,
                    to=row.sender,
                    body=failed_body(
                        row.msg_id,
                        row.recipient,
                        reason=Inject.INJECT_TIMEOUT,
                        error=f"no INJECTED from {row.recipient} within the deadline",
                        stage="timeout",
                    ),
                    ttl_s=self.max_ttl_ms / 1000,
                    trace_id=row.trace_id,
                )
                s.execute(
                    held_table.insert().values(
                        recipient=row.sender,
                        msg_id=f"failed-{row.msg_id}",
                        kind="FAILED",
                        sender=failed.sender,
                        trace_id=row.trace_id,
                        turn_id=None,
                        body=failed.body,
                        headers=None,
                        topic=None,
                        ts_ms=failed.ts_ms,
                        expires_at_ms=failed.expires_at_ms,
                        held_at_ms=now,
                    )
                )
                self.metrics.injected_timeouts.inc()
        return len(due)

    def sweep(self) -> int:
        now = int(time.time() * 1000)
        with self.reads() as r:
            if not self.held.expired(r, now, limit=1):
                return 0
        with self.sessions.begin() as s:
            rows = self.held.expired(s, now)
            tx = Staged()
            for row in rows:
                record = Record(
                    topic=row.topic or "",
                    partition=-1,
                    offset=-1,
                    key=row.recipient.encode(),
                    value=bytes(row.body),
                    headers=tuple(unpack_headers(row.headers)),
                    timestamp_ms=row.ts_ms,
                )
                self.dead_letters.stage(
                    tx,
                    FailureContext(
                        record=record,
                        reason=Verification.EXPIRED,
                        error=f"held for {row.recipient} past expiresAt without a drain",
                        first_failure_ms=now,
                        last_failure_ms=now,
                    ),
                )
            tx.flush(s)
            HeldStore.delete_ids(s, [r.id for r in rows])
        if rows:
            self.metrics.expiries.labels("held").inc(len(rows))
        return len(rows)

    def purge(self, *, every_s: float = 60.0) -> None:
        if time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + every_s
        now = int(time.time() * 1000)
        with self.sessions.begin() as s:
            purge_older_than(s, now - self.max_ttl_ms - DAY_MS)
            HeldStore.purge_drained(s, now - DAY_MS)
            self.conversations.purge(s, now)

    def refresh_roster(self) -> None:
        if self.roster_entries is None:
            return
        entries = sorted(self.roster_entries(), key=lambda e: e.gid)
        if entries == self._last_roster:
            return
        with self.sessions.begin() as s:
            roster_cache.replace_all(s, entries)
        self._last_roster = entries
