"""Outbox tables, registered on :data:`pipeline.store.metadata` (SQLite WAL and PostgreSQL).

``outbox`` holds the exact Kafka record to publish (topic, key, headers, value) plus its place in
the per-branch sequence ``(tenant, branch_key, lsn)``. ``outbox_branch`` is the per-branch counter
that hands out gapless lsns: its row lock serialises writers of one branch, so lsn ``n + 1`` can
never commit before lsn ``n`` (the relay relies on that to see each branch as a contiguous prefix).

``outbox_sent`` holds the branch's ack watermark ``sent_lsn``: every row of the branch up to it was
confirmed by the broker (R-OUT-4), so the relay acks a branch, not each row (docs/outbox.md). It is
a row of its own so the relay's ack and the writers never lock the same row: a writer holds its
``outbox_branch`` row from its lsn upsert to its commit (the disk flush included), and an ack on
that row would wait for it. The writer of a branch's lsn 1 creates its ``outbox_sent`` row.
``outbox_branch.idle_lsn`` is where the relay last found the branch all sent: a branch with
``last_lsn > idle_lsn`` may have unsent rows, and only those are in the relay's index, through
the flag ``active`` (which says just that): a writer's lsn upsert then leaves the index alone.
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
    false,
    text,
)

from pipeline.store import metadata

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants a 64-bit identity.
_ID = BigInteger().with_variant(Integer(), "sqlite")


class RowStatus(enum.IntEnum):
    """A row's own state. ``PENDING`` rows are *sent* once their lsn is at or below their
    branch's watermark ``outbox_branch.sent_lsn`` (the relay never rewrites the row); ``SENT`` is
    kept by rows acked before the watermark and by the in-process effects drain. ``DROPPED``:
    its branch was abandoned (a rewind) before it shipped, never published. ``FAILED``: the broker
    refused it for good (a permanent produce error, the reason in ``error``): terminal, never
    published, and its branch is stopped behind it (docs/outbox.md)."""

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

# No index over PENDING rows: a sent row stays PENDING under its watermark, so one would copy the
# primary key and cost every insert a page; the relay's scan from an id walks the primary key
# (revision 0015_outbox_no_pending_index).
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
    # the watermark when the relay last saw the branch all sent (only ever at or below sent_lsn):
    # the ack raises it to last_lsn when it sends a branch's last row and no writer holds the row
    Column("idle_lsn", BigInteger, nullable=False, default=0, server_default=text("0")),
    # last_lsn > idle_lsn, kept as a flag the index's condition reads: set by the writer that
    # finds it clear, cleared with idle_lsn by the ack (revision 0016_outbox_branch_active)
    Column("active", Boolean, nullable=False, default=False, server_default=false()),
)

outbox_sent = Table(
    "outbox_sent",
    metadata,
    Column("tenant", String(100), primary_key=True),
    Column("branch_key", String(300), primary_key=True),
    # the ack watermark: lsns 1..sent_lsn of the branch are sent (confirmed), the rest are not
    Column("sent_lsn", BigInteger, nullable=False, default=0, server_default=text("0")),
    # set with outbox_branch.abandoned (abandon_branch), so the ack's guard is on its own row
    Column("abandoned", Boolean, nullable=False, default=False),
)


# The branches that may have unsent rows (written since the relay last found them all sent): the
# relay's read and the backlog gauge start from this index, so they cost as many entries as active
# branches, however many sent rows the table still holds. The watermark itself is in outbox_sent.
# The condition reads the flag ``active``, not ``last_lsn > idle_lsn``: SQLite rewrites a partial
# index's entry on every UPDATE that sets a column of its condition, and PostgreSQL cannot update
# such a row in place (HOT), so with last_lsn in it every send wrote an index page too.
def unsent(alias: str = "") -> str:
    """The index's condition as SQL text, its columns qualified by ``alias`` when given: a query
    states it as the index does, so both databases use the index."""
    a = f"{alias}." if alias else ""
    return f"{a}active AND NOT {a}abandoned"


UNSENT = unsent()
Index(
    "ix_outbox_branch_unsent",
    outbox_branch.c.tenant,
    outbox_branch.c.branch_key,
    sqlite_where=text(UNSENT),
    postgresql_where=text(UNSENT),
)
