"""fleet_incarnation: each host's gateway start count, which orders its presence records

Revision ID: 0011_presence_incarnation
Revises: 0010_inject_journal
Create Date: 2026-12-01

Numbered 0011: chained after 0010_inject_journal.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011_presence_incarnation"
down_revision: str | None = "0010_inject_journal"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_incarnation",
        sa.Column("host", sa.String(length=255), primary_key=True),
        sa.Column("incarnation", sa.BigInteger(), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fleet_incarnation")
