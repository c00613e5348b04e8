"""fleet_inject_journal: the forward path's record of an inject attempt (host/inject_journal.py)

Revision ID: 0010_inject_journal
Revises: 0009_stop_requests_roster_gone
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010_inject_journal"
down_revision: str | None = "0009_stop_requests_roster_gone"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_inject_journal",
        sa.Column("msg_id", sa.String(length=255), primary_key=True),
        sa.Column("gid", sa.String(length=255), nullable=False),
        sa.Column("sender", sa.String(length=255), nullable=False),
        sa.Column("reply_host", sa.String(length=255), nullable=False),
        sa.Column("trace_id", sa.String(length=255), nullable=False),
        sa.Column("opened_ms", sa.BigInteger(), nullable=False),
        sa.Column("closed_ms", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
    )
    for column in ("closed_ms", "state"):
        op.create_index(f"ix_fleet_inject_journal_{column}", "fleet_inject_journal", [column])


def downgrade() -> None:
    op.drop_table("fleet_inject_journal")
