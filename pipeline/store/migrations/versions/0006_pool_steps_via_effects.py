"""pool step results move to fleet_idempotency; pool members publish their lanes

Pool step results now go through ``pipeline.effects`` (key class ``pool.<name>``), so
``fleet_pool_results`` has no reader or writer left and is dropped (its rows are step results of
a replay window that the idempotency store now keeps; a downgrade recreates the empty table).
``fleet_pool_members`` holds one lanes row per running member for ``fleet pool status``.

Revision ID: 0006_pool_steps_via_effects
Revises: 0005_wave2_tables
Create Date: 2026-12-01 04:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006_pool_steps_via_effects"
down_revision: str | None = "0005_wave2_tables"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_pool_members",
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("member", sa.String(length=255), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("oldest_started_ms", sa.BigInteger(), nullable=True),
        sa.Column("beat_ms", sa.BigInteger(), nullable=False),
        sa.Column("period_ms", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("pool", "member", name=op.f("pk_fleet_pool_members")),
    )
    with op.batch_alter_table("fleet_pool_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_fleet_pool_results_stored_at_ms"))
    op.drop_table("fleet_pool_results")


def downgrade() -> None:
    op.create_table(
        "fleet_pool_results",
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("member", sa.String(length=255), nullable=False),
        sa.Column("stored_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "event_id", name=op.f("pk_fleet_pool_results")),
    )
    with op.batch_alter_table("fleet_pool_results", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_fleet_pool_results_stored_at_ms"), ["stored_at_ms"], unique=False
        )
    op.drop_table("fleet_pool_members")
