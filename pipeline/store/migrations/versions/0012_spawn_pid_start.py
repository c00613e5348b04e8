"""fleet_spawns.pid_start: which process a launch started, so a restart ends no stranger (R-LIFE-4)

Revision ID: 0012_spawn_pid_start
Revises: 0011_presence_incarnation
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012_spawn_pid_start"
down_revision: str | None = "0011_presence_incarnation"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.add_column(sa.Column("pid_start", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.drop_column("pid_start")
