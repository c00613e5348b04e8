"""Per-key quarantine in the SQL store (R-QUAR-1: per-key quarantine when order matters).

When a key's record is dead-lettered in an ordered flow, the key is quarantined and its later
records are *parked* here, in order, while every other key goes on. State is scoped to
``(consumer group, topic)`` and lives in the store, so it survives a restart and a partition moving
to another member of the group. Release: see :mod:`pipeline.failures.release`.

The ``is_quarantined`` cache is exact across processes because of one rule: only the member that
owns a partition writes quarantine state for that partition's keys, and each write updates the
cache when the caller's transaction commits. A member that gains a partition must call
:meth:`QuarantineStore.refresh` (in its on-assign callback) to see what the previous owner wrote.
"""

from __future__ import annotations

import time

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.record import Record
from pipeline.record_headers import pack_headers
from pipeline.support.clock import now_ms

from .quarantine_model import (
    FAILED,
    ParkedRecord,
    QuarantineEntry,
    ReleaseRequest,
    Scope,
    on_commit,
    where_scope,
)
from .quarantine_tables import parked_table, quarantine_table
from .release import ReleaseOps

__all__ = [
    "ParkedRecord",
    "QuarantineEntry",
    "QuarantineStore",
    "ReleaseRequest",
    "Scope",
]


class QuarantineStore(ReleaseOps):
    """Quarantined keys, their parked records and release requests (R-QUAR)."""

    def __init__(self, engine: Engine, *, max_age_s: float | None = None) -> None:
        """``max_age_s``: also reload a scope's keys when the cached copy is older than this --
        a safety net for a runtime that does not call :meth:`refresh` on assignment (it bounds
        the stale window; only the on-assign refresh closes it)."""
        self.engine = engine
        self.max_age_s = max_age_s
        self._cache: dict[Scope, set[str]] = {}
        self._loaded_at: dict[Scope, float] = {}

    def is_quarantined(self, scope: Scope, key: str) -> bool:
        """Answered from memory; the first call for a scope loads it from the store."""
        keys = self._cache.get(scope)
        if keys is None or (
            self.max_age_s is not None
            and time.monotonic() - self._loaded_at.get(scope, 0.0) > self.max_age_s
        ):
            keys = self.refresh(scope)
        return key in keys

    def refresh(self, scope: Scope) -> set[str]:
        """Reload the quarantined keys of ``scope``. Call it whenever partitions are assigned."""
        q = quarantine_table
        with self.engine.connect() as conn:
            keys = {r.key for r in conn.execute(select(q.c.key).where(where_scope(q, scope)))}
        self._cache[scope] = keys
        self._loaded_at[scope] = time.monotonic()
        return keys

    def quarantine(
        self,
        session: Session,
        scope: Scope,
        key: str,
        *,
        reason: str,
        dead_letter_ref: str,
        record: Record | None,
    ) -> None:
        """Quarantine ``key`` in the caller's transaction, keeping a copy of its dead letter.

        The copy (sequence 0) makes a release independent of the DLQ's retention; without a
        ``record`` a release replays only the parked records. If the key is already quarantined,
        this is a record replayed by a release that failed again: the key stays quarantined and
        the pending release request is marked FAILED (so it is not retried in a loop).
        """
        q = quarantine_table
        if session.execute(select(q.c.id).where(where_scope(q, scope, key))).first() is None:
            session.execute(
                insert(q).values(
                    grp=scope.group,
                    topic=scope.topic,
                    key=key,
                    src_topic=record.topic if record else scope.topic,
                    partition=record.partition if record else -1,
                    reason=reason,
                    dead_letter_ref=dead_letter_ref,
                    quarantined_ms=now_ms(),
                )
            )
            if record is not None:
                self._insert(session, scope, key, record, seq=0, dead_letter=True)
        else:
            self._finish(session, scope, key, FAILED, f"[{reason}] failed again: {dead_letter_ref}")
        on_commit(session, lambda: self._cache.setdefault(scope, set()).add(key))

    def park(self, session: Session, scope: Scope, key: str, record: Record) -> int:
        """Park ``record`` behind quarantined ``key`` in the caller's transaction; returns its
        per-key sequence. Idempotent on (partition, offset): a redelivery is parked once."""
        p = parked_table
        same = session.execute(
            select(p.c.seq).where(
                where_scope(p, scope),
                p.c.src_topic == record.topic,
                p.c.partition == record.partition,
                p.c.offset == record.offset,
            )
        ).first()
        if same is not None:
            return int(same.seq)
        top = session.execute(select(func.max(p.c.seq)).where(where_scope(p, scope, key))).scalar()
        seq = 1 if top is None else int(top) + 1
        self._insert(session, scope, key, record, seq=seq, dead_letter=False)
        return seq

    def _insert(
        self,
        session: Session,
        scope: Scope,
        key: str,
        rec: Record,
        *,
        seq: int,
        dead_letter: bool,
    ) -> None:
        session.execute(
            insert(parked_table).values(
                grp=scope.group,
                topic=scope.topic,
                key=key,
                seq=seq,
                dead_letter=dead_letter,
                src_topic=rec.topic,
                partition=rec.partition,
                offset=rec.offset,
                timestamp_ms=rec.timestamp_ms,
                record_key=rec.key,
                headers=pack_headers(rec.headers),
                value=rec.value,
                parked_ms=now_ms(),
            )
        )

    def scopes_of(self, key: str) -> list[Scope]:
        """Every scope in which ``key`` is quarantined (the CLI infers the scope from it)."""
        return [e.scope for e in self.entries() if e.key == key]

    def counts(self) -> tuple[int, int]:
        """(quarantined keys, parked records) across all scopes, for the gauges."""
        p = parked_table
        with self.engine.connect() as conn:
            keys = conn.execute(select(func.count()).select_from(quarantine_table)).scalar_one()
            parked = conn.execute(
                select(func.count()).select_from(p).where(p.c.dead_letter.is_(False))
            ).scalar_one()
        return int(keys), int(parked)

    def quarantined_keys(self) -> int:
        """For the exporter's ``StoreGauges`` port (``fleet_quarantined_keys``): one query."""
        with self.engine.connect() as conn:
            count = conn.execute(select(func.count()).select_from(quarantine_table)).scalar_one()
        return int(count)

    def parked_records(self) -> int:
        """Records parked behind quarantined keys (``fleet_parked_records``)."""
        return self.counts()[1]

    def entries(self, scope: Scope | None = None) -> list[QuarantineEntry]:
        """Quarantined keys with their parked-record counts (``list`` is an alias)."""
        q, p = quarantine_table, parked_table
        counts = (
            select(p.c.grp, p.c.topic, p.c.key, func.count().label("n"))
            .where(p.c.dead_letter.is_(False))
            .group_by(p.c.grp, p.c.topic, p.c.key)
            .subquery()
        )
        on = (counts.c.grp == q.c.grp) & (counts.c.topic == q.c.topic) & (counts.c.key == q.c.key)
        stmt = select(q, counts.c.n).outerjoin(counts, on)
        if scope is not None:
            stmt = stmt.where(where_scope(q, scope))
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.order_by(q.c.grp, q.c.topic, q.c.key)).all()
        return [
            QuarantineEntry(
                scope=Scope(row.grp, row.topic),
                key=row.key,
                src_topic=row.src_topic,
                partition=row.partition,
                reason=row.reason,
                dead_letter_ref=row.dead_letter_ref,
                quarantined_ms=row.quarantined_ms,
                parked=int(row.n or 0),
            )
            for row in rows
        ]

    list = entries
