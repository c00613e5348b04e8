"""outbox_sent: the relay's ack watermark in a row of its own, apart from the lsn counter

A writer holds its branch's ``outbox_branch`` row lock from its lsn upsert to its commit (the
disk flush included); the relay's ack, which raised ``outbox_branch.sent_lsn``, waited for it,
and the writers behind the ack waited too. The watermark (and a copy of ``abandoned``, the ack's
guard) moves to ``outbox_sent``, one row per branch, which writers never lock.
``outbox_branch.sent_lsn`` becomes ``idle_lsn``: where the relay last found the branch all sent
(at migration time, the watermark itself), so the index of branches that may have unsent rows
keeps its meaning.

Revision ID: 0014_outbox_sent_own_row
Revises: 0013_spawn_pid_start
Create Date: 2026-12-05

Numbered 0014: chained after 0013_spawn_pid_start.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014_outbox_sent_own_row"
down_revision: str | None = "0013_spawn_pid_start"
branch_labels: str | None = None
depends_on: str | None = None

_INDEX = "ix_outbox_branch_unsent"


def _index(column: str) -> None:
    where = sa.text(f"last_lsn > {column} AND NOT abandoned")
    op.create_index(
        _INDEX,
        "outbox_branch",
        ["tenant", "branch_key"],
        sqlite_where=where,
        postgresql_where=where,
    )


def upgrade() -> None:
    op.create_table(
        "outbox_sent",
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("branch_key", sa.String(length=300), nullable=False),
        sa.Column("sent_lsn", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("abandoned", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "branch_key", name="pk_outbox_sent"),
    )
    op.execute(
        "INSERT INTO outbox_sent (tenant, branch_key, sent_lsn, abandoned) "
        "SELECT tenant, branch_key, sent_lsn, abandoned FROM outbox_branch"
    )
    # plain ALTER TABLE statements on both databases: no table copy on SQLite
    op.drop_index(_INDEX, "outbox_branch")
    op.execute("ALTER TABLE outbox_branch RENAME COLUMN sent_lsn TO idle_lsn")
    _index("idle_lsn")


def downgrade() -> None:
    op.drop_index(_INDEX, "outbox_branch")
    op.execute("ALTER TABLE outbox_branch RENAME COLUMN idle_lsn TO sent_lsn")
    op.execute(
        "UPDATE outbox_branch SET sent_lsn = coalesce((SELECT s.sent_lsn FROM outbox_sent s "
        "WHERE s.tenant = outbox_branch.tenant AND s.branch_key = outbox_branch.branch_key), sent_lsn)"
    )
    _index("sent_lsn")
    op.drop_table("outbox_sent")
