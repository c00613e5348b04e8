"""The idempotency table, registered on :data:`pipeline.store.metadata` (SQLite and PostgreSQL).

``fleet_idempotency`` -- one row per ``(key_class, idem_key)``; the primary key IS the
reservation: two callers can never both insert it. ``state`` is :class:`KeyState`; ``result`` the
stored outcome as JSON (a success value or a failure); ``expires_at_ms`` the published retention
(NULL: kept forever); ``lease_until_ms`` bounds how long an in-progress row answers 409.
"""

from __future__ import annotations

import enum

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    and_,
)

from pipeline.store import metadata


class KeyState(enum.IntEnum):
    IN_PROGRESS = 0
    SUCCEEDED = 1
    FAILED = 2  # a stored failure: returned on retry like a success (Stripe keeps its 500s)


idempotency = Table(
    "fleet_idempotency",
    metadata,
    Column("key_class", String(64), primary_key=True),
    Column("idem_key", String(255), primary_key=True),
    Column("payload_hash", String(64), nullable=False),
    Column("state", SmallInteger, nullable=False),
    Column("result", Text, nullable=True),
    Column("attempt", Integer, nullable=False, default=1),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("completed_at_ms", BigInteger, nullable=True),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=True, index=True),
)


def expired(now_ms: int) -> ColumnElement[bool]:
    """Keys past the retention their class published (``purge_expired`` and the store purger)."""
    c = idempotency.c
    return and_(c.expires_at_ms.is_not(None), c.expires_at_ms <= now_ms)
