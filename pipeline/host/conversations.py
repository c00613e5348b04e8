"""Open pulls (for NO_WAITER) and open turns (for TOO_LATE): R-CONV-1, R-CONV-2.

Both live in the store, so a ``fleet poll --wait`` in another process counts as an open pull
for the gateway, and a turn opened by ``fleet ask`` is seen by the gateway that receives the
ANSWER. Rows carry an expiry: a crashed poller cannot leave a waiter open forever.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import BigInteger, Column, String, Table, delete, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import metadata
from pipeline.support.clock import now_ms

waiters_table = Table(
    "fleet_waiters",
    metadata,
    Column("waiter_id", String(64), primary_key=True),
    Column("gid", String(255), nullable=False, index=True),
    Column("opened_ms", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
)

turns_table = Table(
    "fleet_turns",
    metadata,
    Column("turn_id", String(255), primary_key=True),
    Column("asker", String(255), nullable=False),
    Column("asked", String(255), nullable=False),
    Column("ask_msg_id", String(255), nullable=False),
    Column("opened_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),  # waiting | answered | abandoned | expired
)

WAITING, ANSWERED, ABANDONED, EXPIRED = "waiting", "answered", "abandoned", "expired"


class Conversations:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    # -- open pulls --------------------------------------------------------------------------
    @contextlib.contextmanager
    def open_pull(self, gid: str, timeout_s: float) -> Iterator[str]:
        """Registers a blocking pull of ``gid`` for its duration (plus a safety margin)."""
        waiter = uuid.uuid4().hex
        now = now_ms()
        with self.sessions.begin() as s:
            s.execute(
                insert(waiters_table).values(
                    waiter_id=waiter,
                    gid=gid,
                    opened_ms=now,
                    expires_ms=now + int((timeout_s + 5) * 1000),
                )
            )
        try:
            yield waiter
        finally:
            with self.sessions.begin() as s:
                s.execute(delete(waiters_table).where(waiters_table.c.waiter_id == waiter))

    def has_open_pull(self, session: Session, gid: str, now: int | None = None) -> bool:
        now = now_ms() if now is None else now
        row = session.execute(
            select(waiters_table.c.waiter_id)
            .where(waiters_table.c.gid == gid, waiters_table.c.expires_ms > now)
            .limit(1)
        ).first()
        return row is not None

    # -- turns -------------------------------------------------------------------------------
    @staticmethod
    def open_turn(
        session: Session, *, turn_id: str, asker: str, asked: str, msg_id: str, expires_at_ms: int
    ) -> None:
        session.execute(
            insert(turns_table).values(
                turn_id=turn_id,
                asker=asker,
                asked=asked,
                ask_msg_id=msg_id,
                opened_ms=now_ms(),
                expires_at_ms=expires_at_ms,
                state=WAITING,
            )
        )

    @staticmethod
    def turn_waiting(session: Session, turn_id: str, now: int | None = None) -> bool:
        now = now_ms() if now is None else now
        row = session.execute(
            select(turns_table.c.state, turns_table.c.expires_at_ms).where(
                turns_table.c.turn_id == turn_id
            )
        ).first()
        return row is not None and row.state == WAITING and row.expires_at_ms > now

    @staticmethod
    def close_turn(session: Session, turn_id: str, state: str) -> bool:
        result = session.execute(
            update(turns_table)
            .where(turns_table.c.turn_id == turn_id, turns_table.c.state == WAITING)
            .values(state=state)
        )
        return bool(getattr(result, "rowcount", 0))

    @staticmethod
    def expired_turns(session: Session, now: int, limit: int = 500) -> list[Any]:
        """Turns still waiting past their ASK's ``expiresAt``: the asker must hear of them."""
        return list(
            session.execute(
                select(turns_table)
                .where(turns_table.c.state == WAITING, turns_table.c.expires_at_ms < now)
                .order_by(turns_table.c.expires_at_ms)
                .limit(limit)
            )
        )
