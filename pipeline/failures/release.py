"""Release of a quarantined key: filed by an operator, executed by the partition's owner.

Why the owner executes it: a release replays the dead letter and the parked records through the
normal handler path. If anyone else replayed them, new records of the key arriving at the owner
could be handled between the replayed ones, out of order. Inside the owner's loop nothing else of
that partition runs meanwhile, so per-key order holds by construction. The CLI only writes a
request row and waits for it to become ``DONE`` (or ``FAILED``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import CursorResult, delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.errors import FleetError
from pipeline.reasons import Failure
from pipeline.record import Record
from pipeline.record_headers import unpack_headers
from pipeline.support.clock import now_ms

from .quarantine_model import (
    DONE,
    FAILED,
    PENDING,
    ParkedRecord,
    ReleaseRequest,
    Scope,
    on_commit,
    where_scope,
)
from .quarantine_tables import parked_table, quarantine_table, release_table


class ReleaseOps:
    """The release half of :class:`~pipeline.failures.quarantine.QuarantineStore`."""

    engine: Engine
    _cache: dict[Scope, set[str]]

    def request_release(self, scope: Scope, key: str) -> int:
        """File a release request (idempotent while one is pending); returns its id."""
        r = release_table
        with Session(self.engine) as session, session.begin():
            found = session.execute(
                select(quarantine_table.c.id).where(where_scope(quarantine_table, scope, key))
            ).first()
            if found is None:
                raise FleetError(
                    f"key {key!r} is not quarantined in {scope.group}/{scope.topic}",
                    reason=Failure.NOT_QUARANTINED,
                )
            pending = session.execute(
                select(r.c.id).where(where_scope(r, scope, key), r.c.state == PENDING)
            ).first()
            if pending is not None:
                return int(pending.id)
            result = session.execute(
                insert(r).values(
                    grp=scope.group,
                    topic=scope.topic,
                    key=key,
                    state=PENDING,
                    requested_ms=now_ms(),
                    note="",
                )
            )
            assert isinstance(result, CursorResult)
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def pending_releases(self, scope: Scope) -> list[ReleaseRequest]:
        """Pending requests of ``scope``, oldest first; the owner of ``partition`` executes each."""
        return self._requests(where_scope(release_table, scope), release_table.c.state == PENDING)

    def release_status(self, request_id: int) -> ReleaseRequest:
        found = self._requests(release_table.c.id == request_id)
        if not found:
            raise FleetError(f"no release request {request_id}", reason=Failure.UNKNOWN_REQUEST)
        return found[0]

    def _requests(self, *conds: Any) -> list[ReleaseRequest]:
        r, q = release_table, quarantine_table
        stmt = (
            select(r, q.c.src_topic, q.c.partition)
            .outerjoin(q, (q.c.grp == r.c.grp) & (q.c.topic == r.c.topic) & (q.c.key == r.c.key))
            .where(*conds)
            .order_by(r.c.id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [
            ReleaseRequest(
                id=row.id,
                scope=Scope(row.grp, row.topic),
                key=row.key,
                src_topic=row.src_topic,
                partition=row.partition,
                state=row.state,
                requested_ms=row.requested_ms,
                completed_ms=row.completed_ms,
                note=row.note,
            )
            for row in rows
        ]

    def take_for_release(self, scope: Scope, key: str) -> list[ParkedRecord]:
        """The dead letter first, then the parked records, in original order. Reads only:
        nothing is removed until :meth:`complete_release` commits, so a crash mid-release
        replays again (the handler's dedupe absorbs what was already applied)."""
        p = parked_table
        with self.engine.connect() as conn:
            rows = conn.execute(select(p).where(where_scope(p, scope, key)).order_by(p.c.seq)).all()
        return [
            ParkedRecord(
                seq=row.seq,
                dead_letter=bool(row.dead_letter),
                record=Record(
                    topic=row.src_topic,
                    partition=row.partition,
                    offset=row.offset,
                    timestamp_ms=row.timestamp_ms,
                    key=row.record_key,
                    headers=tuple(unpack_headers(row.headers)),
                    value=row.value,
                ),
            )
            for row in rows
        ]

    def complete_release(self, session: Session, scope: Scope, key: str) -> None:
        """Lift the quarantine in the caller's transaction: drop the copies, mark requests DONE."""
        session.execute(delete(parked_table).where(where_scope(parked_table, scope, key)))
        session.execute(delete(quarantine_table).where(where_scope(quarantine_table, scope, key)))
        self._finish(session, scope, key, DONE, "")
        on_commit(session, lambda: self._cache.setdefault(scope, set()).discard(key))

    def fail_release(
        self,
        session: Session,
        scope: Scope,
        key: str,
        *,
        failed_seq: int,
        reason: str,
        error: str,
        dead_letter_ref: str,
    ) -> None:
        """A replayed record failed again: forget the records handled before it, make it the
        key's dead letter, keep the key quarantined, and mark the request FAILED."""
        p = parked_table
        session.execute(delete(p).where(where_scope(p, scope, key), p.c.seq < failed_seq))
        session.execute(
            update(p)
            .where(where_scope(p, scope, key), p.c.seq == failed_seq)
            .values(dead_letter=True)
        )
        session.execute(
            update(quarantine_table)
            .where(where_scope(quarantine_table, scope, key))
            .values(reason=reason, dead_letter_ref=dead_letter_ref)
        )
        self._finish(session, scope, key, FAILED, f"[{reason}] {error}"[:1024])

    def _finish(self, session: Session, scope: Scope, key: str, state: str, note: str) -> None:
        r = release_table
        session.execute(
            update(r)
            .where(where_scope(r, scope, key), r.c.state == PENDING)
            .values(state=state, completed_ms=now_ms(), note=note)
        )
