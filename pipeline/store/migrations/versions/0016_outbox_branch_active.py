"""outbox_branch: the relay's listing reads a flag, so a send's lsn upsert leaves the index alone

``ix_outbox_branch_unsent`` listed the branches with ``last_lsn > idle_lsn``. Every send sets
``last_lsn``, and SQLite rewrites a partial index's entry on each UPDATE that sets a column of
its condition (PostgreSQL cannot update such a row in place, HOT): a page of the index per send.
The condition now reads ``active``, which holds ``last_lsn > idle_lsn`` as a flag: the writer
that finds it clear sets it, the ack that raises ``idle_lsn`` to ``last_lsn`` clears it.
Existing branches get ``active = last_lsn > idle_lsn``, so the same branches stay listed.

Revision ID: 0016_outbox_branch_active
Revises: 0015_outbox_no_pending_index
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0016_outbox_branch_active"
down_revision: str | None = "0015_outbox_no_pending_index"
branch_labels: str | None = None
depends_on: str | None = None

_INDEX = "ix_outbox_branch_unsent"


def _index(condition: str) -> None:
    where = sa.text(f"{condition} AND NOT abandoned")
    op.create_index(
        _INDEX,
        "outbox_branch",
        ["tenant", "branch_key"],
        sqlite_where=where,
        postgresql_where=where,
    )


def upgrade() -> None:
    # plain ALTER TABLE statements on both databases: no table copy on SQLite
    op.add_column(
        "outbox_branch",
        sa.Column("active", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute("UPDATE outbox_branch SET active = (last_lsn > idle_lsn)")
    op.drop_index(_INDEX, "outbox_branch")
    _index("active")


def downgrade() -> None:
    op.drop_index(_INDEX, "outbox_branch")
    _index("last_lsn > idle_lsn")
    op.execute("ALTER TABLE outbox_branch DROP COLUMN active")
