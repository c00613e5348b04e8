"""The held store: pull-path messages waiting for their recipient to drain them.

Pull path (at-least-once): a held row is written in the same transaction as the record's dedupe
row; the offset is committed after. ``poll`` marks rows drained in one transaction, so a
message is handed out once. Each row keeps the original headers so the expiry sweeper can
dead-letter it verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    UniqueConstraint,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope
from pipeline.store import metadata
from pipeline.support.clock import now_ms

held_table = Table(
    "fleet_held",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("recipient", String(255), nullable=False),
    Column("msg_id", String(255), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("sender", String(255), nullable=False),
    Column("trace_id", String(255), nullable=True),
    Column("turn_id", String(255), nullable=True),
    Column("body", LargeBinary, nullable=False),
    Column("headers", LargeBinary, nullable=True),
    Column("topic", String(255), nullable=True),
    Column("ts_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("held_at_ms", BigInteger, nullable=False),
    Column("drained_at_ms", BigInteger, nullable=True),
    UniqueConstraint("recipient", "msg_id", name="uq_fleet_held_recipient_msg"),
    Index("ix_fleet_held_pending", "recipient", "drained_at_ms", "id"),
    Index("ix_fleet_held_expiry", "drained_at_ms", "expires_at_ms"),
)


@dataclass(frozen=True, slots=True)
class HeldMessage:
    id: int
    recipient: str
    msg_id: str
    kind: str
    sender: str
    trace_id: str | None
    turn_id: str | None
    body: bytes
    ts_ms: int
    expires_at_ms: int
    held_at_ms: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "msgId": self.msg_id,
            "kind": self.kind,
            "from": self.sender,
            "to": self.recipient,
            "traceId": self.trace_id,
            "turnId": self.turn_id,
            "body": self.body.decode("utf-8", errors="replace"),
            "ts": self.ts_ms,
            "expiresAt": self.expires_at_ms,
            "heldAt": self.held_at_ms,
        }


def _message(row: Any) -> HeldMessage:
    return HeldMessage(
        id=row.id,
        recipient=row.recipient,
        msg_id=row.msg_id,
        kind=row.kind,
        sender=row.sender,
        trace_id=row.trace_id,
        turn_id=row.turn_id,
        body=bytes(row.body),
        ts_ms=row.ts_ms,
        expires_at_ms=row.expires_at_ms,
        held_at_ms=row.held_at_ms,
    )


def hold_notice(session: Session, env: Envelope, now: int) -> bool:
    """A gateway notice (``FAILED``, an expiry) for a local pull entity, straight into its held
    store: it needs no broker. A notice with the same msgId already held for the recipient (the
    DLQ reporter's ``FAILED`` about the same send) is kept as the one: False, nothing written."""
    t = held_table
    found = session.execute(
        select(t.c.id).where(t.c.recipient == env.to, t.c.msg_id == env.msg_id)
    ).first()
    if found is not None:
        return False
    session.execute(
        t.insert().values(
            recipient=env.to,
            msg_id=env.msg_id,
            kind=env.kind.value,
            sender=env.sender,
            trace_id=env.trace_id,
            turn_id=env.turn_id,
            body=env.body,
            headers=None,
            topic=None,
            ts_ms=env.ts_ms,
            expires_at_ms=env.expires_at_ms,
            held_at_ms=now,
        )
    )
    return True


class HeldStore:
    """Reads and drains the held store; writes happen staged in the runtime's batch."""

    def __init__(
        self, sessions: sessionmaker[Session], *, reads: sessionmaker[Session] | None = None
    ) -> None:
        self.sessions = sessions
        self.reads = reads

    def pending_count(self, session: Session, recipient: str | None = None) -> int:
        q = select(func.count()).select_from(held_table).where(held_table.c.drained_at_ms.is_(None))
        if recipient is not None:
            q = q.where(held_table.c.recipient == recipient)
        return int(session.execute(q).scalar_one())

    def poll(
        self,
        recipient: str,
        *,
        sender: str | None = None,
        limit: int = 100,
        kinds: Sequence[str] | None = None,
        drain: bool = True,
    ) -> list[HeldMessage]:
        """Hand out up to ``limit`` undrained messages in arrival order and mark them drained.

        ``sender`` filters on the envelope's ``from``: the per-worker drain (R-HOLD-1).
        An empty store is answered by a read (no write lock), so a waiting poll loop is cheap.
        A message past its ``expiresAt`` is never handed out, swept or not (R-EXP-1: expiry
        is enforced at delivery; the sweeper dead-letters it).
        """
        now = now_ms()
        if self.reads is not None and not self._anything(recipient, now):
            return []
        with self.sessions.begin() as session:
            q = (
                select(held_table)
                .where(
                    held_table.c.recipient == recipient,
                    held_table.c.drained_at_ms.is_(None),
                    held_table.c.expires_at_ms >= now,
                )
                .order_by(held_table.c.id)
                .limit(limit)
                # PostgreSQL: concurrent drains skip each other's rows instead of handing the
                # same message out twice; SQLite serializes writers (BEGIN IMMEDIATE) already.
                .with_for_update(skip_locked=True)
            )
            if sender is not None:
                q = q.where(held_table.c.sender == sender)
            if kinds:
                q = q.where(held_table.c.kind.in_(list(kinds)))
            rows = [_message(r) for r in session.execute(q)]
            if drain and rows:
                session.execute(
                    update(held_table)
                    .where(held_table.c.id.in_([r.id for r in rows]))
                    .values(drained_at_ms=now)
                )
        return rows

    def _anything(self, recipient: str, now: int) -> bool:
        assert self.reads is not None
        with self.reads() as s:
            row = s.execute(
                select(held_table.c.id)
                .where(
                    held_table.c.recipient == recipient,
                    held_table.c.drained_at_ms.is_(None),
                    held_table.c.expires_at_ms >= now,
                )
                .limit(1)
            ).first()
        return row is not None

    @staticmethod
    def pending_stats(session: Session, recipient: str, now: int) -> tuple[int, int | None]:
        """Undrained, unexpired messages for ``recipient``: their count and the oldest held_at."""
        row = session.execute(
            select(func.count(), func.min(held_table.c.held_at_ms)).where(
                held_table.c.recipient == recipient,
                held_table.c.drained_at_ms.is_(None),
                held_table.c.expires_at_ms >= now,
            )
        ).one()
        return int(row[0]), None if row[1] is None else int(row[1])

    def expired(self, session: Session, now: int, limit: int = 500) -> list[Any]:
        q = (
            select(held_table)
            .where(held_table.c.drained_at_ms.is_(None), held_table.c.expires_at_ms < now)
            .order_by(held_table.c.id)
            .limit(limit)
        )
        return list(session.execute(q))

    @staticmethod
    def delete_ids(session: Session, ids: Sequence[int]) -> None:
        if ids:
            session.execute(delete(held_table).where(held_table.c.id.in_(list(ids))))
