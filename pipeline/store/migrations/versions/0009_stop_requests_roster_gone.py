"""fleet_stop_requests + fleet_roster_gone: a STOP's requester deadline, a reaped gid's cause

Revision ID: 0009_stop_requests_roster_gone
Revises: 0008_parked_headers_binary
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009_stop_requests_roster_gone"
down_revision: str | None = "0008_parked_headers_binary"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_stop_requests",
        sa.Column("msg_id", sa.String(length=255), primary_key=True),
        sa.Column("stop_id", sa.String(length=255), nullable=False),
        sa.Column("gid", sa.String(length=255), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("trace_id", sa.String(length=255), nullable=False),
        sa.Column("sent_ms", sa.BigInteger(), nullable=False),
        sa.Column("deadline_ms", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
    )
    for column in ("stop_id", "deadline_ms", "state"):
        op.create_index(f"ix_fleet_stop_requests_{column}", "fleet_stop_requests", [column])
    op.create_table(
        "fleet_roster_gone",
        sa.Column("gid", sa.String(length=255), primary_key=True),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("cause", sa.String(length=16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fleet_roster_gone")
    op.drop_table("fleet_stop_requests")
