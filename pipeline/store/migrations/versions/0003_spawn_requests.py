"""fleet_spawn_requests: the requester's SPAWNs and their deadlines

Revision ID: 0003_spawn_requests
Revises: 0002_outbox_failed
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_spawn_requests"
down_revision: str | None = "0002_outbox_failed"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_spawn_requests",
        sa.Column("msg_id", sa.String(length=255), primary_key=True),
        sa.Column("spawn_id", sa.String(length=255), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.String(length=255), nullable=False),
        sa.Column("parent", sa.String(length=255), nullable=True),
        sa.Column("job", sa.String(length=255), nullable=True),
        sa.Column("trace_id", sa.String(length=255), nullable=False),
        sa.Column("sent_ms", sa.BigInteger(), nullable=False),
        sa.Column("deadline_ms", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
    )
    for column in ("spawn_id", "deadline_ms", "state"):
        op.create_index(f"ix_fleet_spawn_requests_{column}", "fleet_spawn_requests", [column])


def downgrade() -> None:
    op.drop_table("fleet_spawn_requests")
