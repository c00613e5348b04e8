"""outbox_branch.sent_lsn: the relay's per-branch ack watermark, and the index of unsent branches

The relay acks a branch ("lsns 1..sent_lsn are confirmed") instead of rewriting each row's
status. The data step sets each branch's watermark to the end of its sent prefix: the lsn
before its lowest PENDING or FAILED row, else its last lsn (sent, dropped or purged up to it).

Revision ID: 0012_outbox_sent_lsn
Revises: 0011_presence_incarnation
Create Date: 2026-12-05

Numbered 0012: chained after 0011_presence_incarnation.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision: str = "0012_outbox_sent_lsn"
down_revision: str | None = "0011_presence_incarnation"
branch_labels: str | None = None
depends_on: str | None = None

_UNSENT = sa.text("last_lsn > sent_lsn AND NOT abandoned")


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN with a constant default: no table copy on SQLite
    op.add_column(
        "outbox_branch",
        sa.Column("sent_lsn", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    # a store whose outbox rows have no branch row (v0.1.0's partial create_all) gets one
    op.execute(
        "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, sent_lsn) "
        "SELECT o.tenant, o.branch_key, max(o.lsn), false, 0 FROM outbox o WHERE NOT EXISTS ("
        "SELECT 1 FROM outbox_branch b WHERE b.tenant = o.tenant AND b.branch_key = o.branch_key) "
        "GROUP BY o.tenant, o.branch_key"
    )
    op.execute(
        "UPDATE outbox_branch SET sent_lsn = coalesce(("
        "SELECT min(o.lsn) - 1 FROM outbox o WHERE o.tenant = outbox_branch.tenant "
        "AND o.branch_key = outbox_branch.branch_key AND o.status IN (0, 3)), last_lsn)"
    )
    # Above the watermark every row must be PENDING, FAILED or DROPPED (the relay reads only
    # PENDING ones and would stop at a SENT one for good). A SENT row after an unsent one (a
    # store written before the ack kept "sent" a prefix) goes out again: a duplicate the fold
    # drops, never a loss.
    op.execute(
        "UPDATE outbox SET status = 0, sent_at = NULL WHERE status = 1 AND lsn > ("
        "SELECT b.sent_lsn FROM outbox_branch b WHERE b.tenant = outbox.tenant "
        "AND b.branch_key = outbox.branch_key)"
    )
    op.create_index(
        "ix_outbox_branch_unsent",
        "outbox_branch",
        ["tenant", "branch_key"],
        sqlite_where=_UNSENT,
        postgresql_where=_UNSENT,
    )


def downgrade() -> None:
    # rows sent under the watermark get their per-row status back before the watermark goes
    op.execute(
        f"UPDATE outbox SET status = 1, sent_at = {time.time():.3f} WHERE status = 0 AND lsn <= ("
        "SELECT b.sent_lsn FROM outbox_branch b WHERE b.tenant = outbox.tenant "
        "AND b.branch_key = outbox.branch_key)"
    )
    op.drop_index(
        "ix_outbox_branch_unsent",
        "outbox_branch",
        sqlite_where=_UNSENT,
        postgresql_where=_UNSENT,
    )
    with op.batch_alter_table("outbox_branch") as batch:
        batch.drop_column("sent_lsn")
