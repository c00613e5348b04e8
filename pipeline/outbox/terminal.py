"""A row the broker refused for good: terminal ``FAILED`` with its reason, its branch stopped.

R-OUT-3 keeps each branch in lsn order and the fold needs gapless lsns, so a row that can never
be published is neither retried forever nor skipped: it becomes ``FAILED`` (terminal, with the
permanent produce error's reason) and its branch **stops loudly** behind it -- later rows stay
pending, unpublished, visible in ``fleet outbox status`` and the ``fleet_outbox_stopped_branches``
gauge -- until an operator abandons the branch. In the same transaction a :class:`TerminalSink`
may stage a ``FAILED`` for the row's sender (the gateway's does, through the outbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine, literal, select, update
from sqlalchemy.orm import Session

from pipeline.record import Headers
from pipeline.record_headers import unpack_headers

from .tables import RowStatus, outbox, outbox_sent


@dataclass(frozen=True, kw_only=True)
class FailedRow:
    """The row the broker refused, and why (a :class:`~pipeline.reasons.ProducePermanent` value)."""

    id: int
    tenant: str
    branch_key: str
    lsn: int
    topic: str
    key: bytes | None
    headers: Headers
    reason: str
    error: str

    @classmethod
    def of(cls, row: Any, *, reason: str, error: str) -> FailedRow:
        return cls(
            id=row[0],
            tenant=row[1],
            branch_key=row[2],
            lsn=row[3],
            topic=row[4],
            key=row[5],
            headers=unpack_headers(row[7]),
            reason=reason,
            error=error,
        )


class TerminalSink(Protocol):
    """Port: tell the row's sender, inside the transaction that makes the row ``FAILED``."""

    def row_failed(self, session: Session, row: FailedRow) -> None: ...


def fail_row(engine: Engine, row: FailedRow, sink: TerminalSink | None) -> bool:
    """Make ``row`` FAILED if it heads its branch (lsn - 1 sent: at or below the branch's
    watermark); return whether it did.

    A row behind a still-pending lsn is left pending: its branch is resent from the earlier row,
    and the refusal recurs when it is this row's turn.
    """
    c, b = outbox.c, outbox_sent.c
    with Session(engine) as session, session.begin():
        if row.lsn > 1:
            mark = session.execute(
                select(b.sent_lsn).where(b.tenant == row.tenant, b.branch_key == row.branch_key)
            ).scalar()
            if (mark or 0) < row.lsn - 1:
                return False
        done = session.execute(
            update(outbox)
            .where(c.id == row.id, c.status == int(RowStatus.PENDING))
            .values(status=int(RowStatus.FAILED), error=row.reason)
        )
        if not getattr(done, "rowcount", 0):
            return False  # dropped meanwhile (a rewind): nothing to report
        if sink is not None:
            sink.row_failed(session, row)
    return True


def stopped_branches(engine: Engine, *, tenant: str | None = None) -> set[tuple[str, str]]:
    """Branches with a FAILED row: the relay publishes none of their later rows.

    Read on the partial index ``ix_outbox_failed`` (as many entries as FAILED rows): the status is
    a literal, as the index states it, and there is no ``DISTINCT`` -- with one, SQLite scanned
    the whole outbox on its unique index instead (45 ms per relay start at 50k rows)."""
    c = outbox.c
    stmt = select(c.tenant, c.branch_key).where(
        c.status == literal(int(RowStatus.FAILED), literal_execute=True)
    )
    if tenant is not None:
        stmt = stmt.where(c.tenant == tenant)
    with engine.connect() as conn:
        return {(t, b) for t, b in conn.execute(stmt)}
