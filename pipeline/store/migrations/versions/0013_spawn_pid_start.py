"""fleet_spawns.pid_start: which process a launch started, so a restart ends no stranger (R-LIFE-4)

Revision ID: 0013_spawn_pid_start
Revises: 0012_outbox_sent_lsn
Create Date: 2026-12-05

Numbered 0013: chained after 0012_outbox_sent_lsn.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013_spawn_pid_start"
down_revision: str | None = "0012_outbox_sent_lsn"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.add_column(sa.Column("pid_start", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.drop_column("pid_start")
