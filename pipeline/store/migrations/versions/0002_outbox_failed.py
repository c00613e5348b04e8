"""outbox: FAILED rows (status 3) with their reason, and an index over them

A permanent produce error makes a row terminal; the relay lists failed rows to stop
their branches, hence the partial index.

Revision ID: 0002_outbox_failed
Revises: 0001_v0_1_0
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_outbox_failed"
down_revision: str | None = "0001_v0_1_0"
branch_labels: str | None = None
depends_on: str | None = None

_FAILED = sa.text("status = 3")


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN (no table copy on SQLite: ix_outbox_pending stays as it is)
    op.add_column("outbox", sa.Column("error", sa.String(length=64), nullable=True))
    op.create_index(
        "ix_outbox_failed", "outbox", ["id"], sqlite_where=_FAILED, postgresql_where=_FAILED
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_failed", "outbox", sqlite_where=_FAILED, postgresql_where=_FAILED)
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("error")
