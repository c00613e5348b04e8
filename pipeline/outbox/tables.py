"""Outbox tables, registered on :data:`pipeline.store.metadata` (SQLite WAL and PostgreSQL).

``outbox`` holds the exact Kafka record to publish (topic, key, headers, value) plus its place in
the per-branch sequence ``(tenant, branch_key, lsn)``. ``outbox_branch`` is the per-branch counter
that hands out gapless lsns: its row lock serialises writers of one branch, so lsn ``n + 1`` can
never commit before lsn ``n`` (the relay relies on that to see each branch as a contiguous prefix).
"""

from __future__ import annotations

import enum

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Table,
    UniqueConstraint,
    text,
)

from pipeline.store import metadata

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants a 64-bit identity.
_ID = BigInteger().with_variant(Integer(), "sqlite")


class RowStatus(enum.IntEnum):
    """``PENDING`` -> ``SENT`` once the broker confirmed it; ``DROPPED`` when its branch was
    abandoned (a rewind) before it shipped: a dropped row is never published. ``FAILED``: the
    broker refused it for good (a permanent produce error, the reason in ``error``): terminal,
    never published, and its branch is stopped behind it (docs/outbox.md)."""

    PENDING = 0
    SENT = 1
    DROPPED = 2
    FAILED = 3


outbox = Table(
    "outbox",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("tenant", String(100), nullable=False),
    Column("branch_key", String(300), nullable=False),
    Column("lsn", BigInteger, nullable=False),
    Column("topic", String(249), nullable=False),
    Column("key", LargeBinary, nullable=True),
    Column("value", LargeBinary, nullable=True),
    Column("headers", LargeBinary, nullable=True),
    Column("status", SmallInteger, nullable=False, default=int(RowStatus.PENDING)),
    Column("created_at", Float, nullable=False),
    Column("sent_at", Float, nullable=True),
    Column("error", String(64), nullable=True),  # FAILED: the permanent produce error's reason
    UniqueConstraint("tenant", "branch_key", "lsn", name="uq_outbox_branch_lsn"),
)

# A partial index over pending rows only: the relay's scan stays as small as the backlog however
# many sent rows accumulate, and an ack just removes entries. One index, not one per tenant: every
# extra index is paid again on each ack (a tenant-scoped relay filters the same scan).
_PENDING = text(f"status = {int(RowStatus.PENDING)}")
Index("ix_outbox_pending", outbox.c.id, sqlite_where=_PENDING, postgresql_where=_PENDING)
# Failed rows stop their branch: the relay lists them often, so they get their own tiny index.
_FAILED = text(f"status = {int(RowStatus.FAILED)}")
Index("ix_outbox_failed", outbox.c.id, sqlite_where=_FAILED, postgresql_where=_FAILED)

outbox_branch = Table(
    "outbox_branch",
    metadata,
    Column("tenant", String(100), primary_key=True),
    Column("branch_key", String(300), primary_key=True),
    Column("last_lsn", BigInteger, nullable=False),
    Column("abandoned", Boolean, nullable=False, default=False),
)
