"""fleet_stops + fleet_spawns.ended_ms: STOP and reap (R-LIFE-1)

Revision ID: 0007_spawn_stops
Revises: 0006_pool_steps_via_effects
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007_spawn_stops"
down_revision: str | None = "0006_pool_steps_via_effects"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.add_column(sa.Column("ended_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "fleet_stops",
        sa.Column("stop_id", sa.String(length=255), primary_key=True),
        sa.Column("gid", sa.String(length=255), nullable=False),
        sa.Column("request_msg_id", sa.String(length=255), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("requester_host", sa.String(length=255), nullable=False),
        sa.Column("trace_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
    )
    for column in ("gid", "state"):
        op.create_index(f"ix_fleet_stops_{column}", "fleet_stops", [column])


def downgrade() -> None:
    op.drop_table("fleet_stops")
    with op.batch_alter_table("fleet_spawns") as batch:
        batch.drop_column("ended_ms")
