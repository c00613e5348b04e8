"""Sender side of the forward path: every brief sent to an inject-mode recipient is tracked.

The row is written in the same transaction as the send's outbox row. ``INJECTED`` (correlated by
msgId) settles it; a row still pending at its deadline becomes exactly one ``FAILED`` in the
sender's own pull store (seed 000 §5: "no INJECTED within a bound = fast explicit failure").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, String, Table, insert, select, update
from sqlalchemy.orm import Session

from pipeline.store import metadata

forward_table = Table(
    "fleet_forward_sends",
    metadata,
    Column("msg_id", String(255), primary_key=True),
    Column("sender", String(255), nullable=False),
    Column("recipient", String(255), nullable=False),
    Column("trace_id", String(255), nullable=False),
    Column("sent_ms", BigInteger, nullable=False),
    Column("deadline_ms", BigInteger, nullable=False, index=True),
    Column("state", String(16), nullable=False, index=True),  # pending | injected | failed
    Column("reason", String(64), nullable=True),
)

PENDING, INJECTED, FAILED = "pending", "injected", "failed"


def track(
    session: Session,
    *,
    msg_id: str,
    sender: str,
    recipient: str,
    trace_id: str,
    sent_ms: int,
    deadline_ms: int,
) -> None:
    session.execute(
        insert(forward_table).values(
            msg_id=msg_id,
            sender=sender,
            recipient=recipient,
            trace_id=trace_id,
            sent_ms=sent_ms,
            deadline_ms=deadline_ms,
            state=PENDING,
        )
    )


def settle(session: Session, msg_id: str, state: str, reason: str | None = None) -> bool:
    """Move a pending row to ``state``; False when it was not pending (already settled)."""
    result = session.execute(
        update(forward_table)
        .where(forward_table.c.msg_id == msg_id, forward_table.c.state == PENDING)
        .values(state=state, reason=reason)
    )
    return bool(getattr(result, "rowcount", 0))


def state_of(session: Session, msg_id: str) -> str | None:
    row = session.execute(
        select(forward_table.c.state).where(forward_table.c.msg_id == msg_id)
    ).first()
    return None if row is None else str(row.state)


def overdue(session: Session, now: int, limit: int = 500) -> list[Any]:
    return list(
        session.execute(
            select(forward_table)
            .where(forward_table.c.state == PENDING, forward_table.c.deadline_ms < now)
            .order_by(forward_table.c.deadline_ms)
            .limit(limit)
        )
    )
