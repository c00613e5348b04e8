"""fleet_spawns: the target's spawns by spawnId (dedupe + stored outcome, R-SPAWN-2)

Revision ID: 0004_spawns
Revises: 0003_spawn_requests
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_spawns"
down_revision: str | None = "0003_spawn_requests"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_spawns",
        sa.Column("spawn_id", sa.String(length=255), primary_key=True),
        sa.Column("request_msg_id", sa.String(length=255), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("requester_host", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.String(length=255), nullable=False),
        sa.Column("parent", sa.String(length=255), nullable=True),
        sa.Column("job", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
    )
    for column in ("parent", "job", "state"):
        op.create_index(f"ix_fleet_spawns_{column}", "fleet_spawns", [column])


def downgrade() -> None:
    op.drop_table("fleet_spawns")
