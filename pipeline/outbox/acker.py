"""Marking confirmed rows sent: the relay's only write, and the guard that keeps it honest.

R-OUT-4: "ack only what the broker accepted". Pending rows of a branch are a contiguous suffix
(lsns commit in order), so "sent" stays a per-branch prefix as long as a run of confirmed rows is
acked only when the lsn just before it is no longer pending.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, and_, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError

from .tables import RowStatus, outbox


class Acker:
    """Acks confirmed rows for one relay (which must be the only relay of its tenant)."""

    def __init__(self, engine: Engine, *, tenant: str | None) -> None:
        self.engine = engine
        self.tenant = tenant
        # SQLite runs one writer at a time, so ids become visible in order (PostgreSQL: not so)
        self._serial_ids = engine.dialect.name == "sqlite"
        self._acked_upto: dict[tuple[str, str], int] = {}  # lsn this relay last acked, per branch

    def ack(self, rows: list[Any], *, whole_batch: bool = False) -> None:
        """Mark confirmed rows sent, except runs whose branch has an earlier lsn still pending.

        Pending rows of a branch are a suffix (inv. 2), so "lsn lo-1 is pending" is the whole
        guard: such a run stays pending and the branch is resent from its lowest unacknowledged
        lsn. Two statements per batch whatever its size.
        """
        if not rows:
            return
        firsts: dict[tuple[str, str], int] = {}
        lasts: dict[tuple[str, str], int] = {}
        for row in rows:
            firsts.setdefault((row[1], row[2]), row[3])
            lasts[(row[1], row[2])] = row[3]
        known = self._acked_upto
        # Only branches whose lsn lo-1 this relay did not ack itself need a look in the store
        # (first seen since start, after a failure, or a row that committed late).
        probe = [
            (t, b, lo - 1)
            for (t, b), lo in firsts.items()
            if lo > 1 and known.get((t, b)) != lo - 1
        ]
        c = outbox.c
        try:
            with self.engine.begin() as conn:
                blocked: set[tuple[str, str]] = set()
                if probe:
                    blocked = {
                        (t, b)
                        for t, b in conn.execute(
                            select(c.tenant, c.branch_key).where(
                                # OR of point lookups: each uses the unique index (a row-value
                                # IN would scan every pending row)
                                or_(
                                    *(
                                        and_(c.tenant == t, c.branch_key == b, c.lsn == lsn)
                                        for t, b, lsn in probe
                                    )
                                ),
                                c.status == int(RowStatus.PENDING),
                            )
                        )
                    }
                conn.execute(self._statement(rows, blocked, whole_batch=whole_batch))
            if len(known) > 100_000:
                known.clear()  # only an optimisation: forgetting costs one probe per branch
            for branch, lsn in lasts.items():
                if branch not in blocked:
                    known[branch] = lsn
        except SQLAlchemyError as exc:
            # Not acked: these rows go out again; the consumer's fold drops the copies.
            raise StoreError(f"outbox relay: cannot ack {len(rows)} rows: {exc}") from exc

    def _statement(
        self, rows: list[Any], blocked: set[tuple[str, str]], *, whole_batch: bool
    ) -> Any:
        # Only PENDING rows become SENT: a row a rewind dropped while it was in flight stays
        # DROPPED (the drop was decided first; see docs/outbox.md, crash windows).
        c = outbox.c
        stmt = update(outbox).values(status=int(RowStatus.SENT), sent_at=time.time())
        stmt = stmt.where(c.status == int(RowStatus.PENDING))
        first, last = rows[0][0], rows[-1][0]
        if whole_batch and self._serial_ids and not blocked:
            # SQLite commits one writer at a time, so no pending row inside [first, last] was
            # missed by the fetch: a plain id range (no per-row parameters) covers the batch.
            stmt = stmt.where(c.id >= first, c.id <= last)
            return stmt if self.tenant is None else stmt.where(c.tenant == self.tenant)
        ids = [row[0] for row in rows if (row[1], row[2]) not in blocked]
        return stmt.where(c.id.in_(ids))
