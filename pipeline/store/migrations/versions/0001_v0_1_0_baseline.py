"""Baseline: the schema v0.1.0 shipped (what its ``create_all`` made), frozen.

v0.1.0 created only the tables whose modules a process had imported, so a v0.1.0 store may hold
any subset of these: each table (with its indexes) is created only where it is missing, which
lets ``fleet store upgrade`` adopt such a store. Never edit this file; add a revision.

Revision ID: 0001_v0_1_0
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001_v0_1_0"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _missing(table: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(table)


def upgrade() -> None:
    if _missing("fleet_dedupe"):
        op.create_table(
            "fleet_dedupe",
            sa.Column("scope", sa.String(length=255), nullable=False),
            sa.Column("msg_id", sa.String(length=255), nullable=False),
            sa.Column("seen_at_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("scope", "msg_id", name=op.f("pk_fleet_dedupe")),
        )
        op.create_index(
            op.f("ix_fleet_dedupe_seen_at_ms"), "fleet_dedupe", ["seen_at_ms"], unique=False
        )
    if _missing("fleet_failed_reported"):
        op.create_table(
            "fleet_failed_reported",
            sa.Column("original_msg_id", sa.String(length=255), nullable=False),
            sa.Column("failed_msg_id", sa.String(length=300), nullable=False),
            sa.Column("sender", sa.String(length=512), nullable=False),
            sa.Column("reason", sa.String(length=64), nullable=False),
            sa.Column("dead_letter_ref", sa.String(length=512), nullable=False),
            sa.Column("reported_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("original_msg_id", name=op.f("pk_fleet_failed_reported")),
        )
    if _missing("fleet_forward_sends"):
        op.create_table(
            "fleet_forward_sends",
            sa.Column("msg_id", sa.String(length=255), nullable=False),
            sa.Column("sender", sa.String(length=255), nullable=False),
            sa.Column("recipient", sa.String(length=255), nullable=False),
            sa.Column("trace_id", sa.String(length=255), nullable=False),
            sa.Column("sent_ms", sa.BigInteger(), nullable=False),
            sa.Column("deadline_ms", sa.BigInteger(), nullable=False),
            sa.Column("state", sa.String(length=16), nullable=False),
            sa.Column("reason", sa.String(length=64), nullable=True),
            sa.PrimaryKeyConstraint("msg_id", name=op.f("pk_fleet_forward_sends")),
        )
        op.create_index(
            op.f("ix_fleet_forward_sends_deadline_ms"),
            "fleet_forward_sends",
            ["deadline_ms"],
            unique=False,
        )
        op.create_index(
            op.f("ix_fleet_forward_sends_state"), "fleet_forward_sends", ["state"], unique=False
        )
    if _missing("fleet_held"):
        op.create_table(
            "fleet_held",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("recipient", sa.String(length=255), nullable=False),
            sa.Column("msg_id", sa.String(length=255), nullable=False),
            sa.Column("kind", sa.String(length=32), nullable=False),
            sa.Column("sender", sa.String(length=255), nullable=False),
            sa.Column("trace_id", sa.String(length=255), nullable=True),
            sa.Column("turn_id", sa.String(length=255), nullable=True),
            sa.Column("body", sa.LargeBinary(), nullable=False),
            sa.Column("headers", sa.LargeBinary(), nullable=True),
            sa.Column("topic", sa.String(length=255), nullable=True),
            sa.Column("ts_ms", sa.BigInteger(), nullable=False),
            sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
            sa.Column("held_at_ms", sa.BigInteger(), nullable=False),
            sa.Column("drained_at_ms", sa.BigInteger(), nullable=True),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_held")),
            sa.UniqueConstraint("recipient", "msg_id", name="uq_fleet_held_recipient_msg"),
        )
        op.create_index(
            "ix_fleet_held_expiry", "fleet_held", ["drained_at_ms", "expires_at_ms"], unique=False
        )
        op.create_index(
            "ix_fleet_held_pending",
            "fleet_held",
            ["recipient", "drained_at_ms", "id"],
            unique=False,
        )
    if _missing("fleet_parked"):
        op.create_table(
            "fleet_parked",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("grp", sa.String(length=255), nullable=False),
            sa.Column("topic", sa.String(length=255), nullable=False),
            sa.Column("key", sa.String(length=512), nullable=False),
            sa.Column("seq", sa.Integer(), nullable=False),
            sa.Column("dead_letter", sa.Boolean(), nullable=False),
            sa.Column("src_topic", sa.String(length=255), nullable=False),
            sa.Column("partition", sa.Integer(), nullable=False),
            sa.Column("offset", sa.BigInteger(), nullable=False),
            sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
            sa.Column("record_key", sa.LargeBinary(), nullable=True),
            sa.Column("headers", sa.Text(), nullable=False),
            sa.Column("value", sa.LargeBinary(), nullable=True),
            sa.Column("parked_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_parked")),
            sa.UniqueConstraint("grp", "topic", "key", "seq", name="uq_fleet_parked_key_seq"),
            sa.UniqueConstraint(
                "grp", "topic", "src_topic", "partition", "offset", name="uq_fleet_parked_position"
            ),
        )
    if _missing("fleet_quarantine"):
        op.create_table(
            "fleet_quarantine",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("grp", sa.String(length=255), nullable=False),
            sa.Column("topic", sa.String(length=255), nullable=False),
            sa.Column("key", sa.String(length=512), nullable=False),
            sa.Column("src_topic", sa.String(length=255), nullable=False),
            sa.Column("partition", sa.Integer(), nullable=False),
            sa.Column("reason", sa.String(length=64), nullable=False),
            sa.Column("dead_letter_ref", sa.String(length=512), nullable=False),
            sa.Column("quarantined_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_quarantine")),
            sa.UniqueConstraint("grp", "topic", "key", name="uq_fleet_quarantine_scope_key"),
        )
    if _missing("fleet_release_request"):
        op.create_table(
            "fleet_release_request",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("grp", sa.String(length=255), nullable=False),
            sa.Column("topic", sa.String(length=255), nullable=False),
            sa.Column("key", sa.String(length=512), nullable=False),
            sa.Column("state", sa.String(length=16), nullable=False),
            sa.Column("requested_ms", sa.BigInteger(), nullable=False),
            sa.Column("completed_ms", sa.BigInteger(), nullable=True),
            sa.Column("note", sa.String(length=1024), nullable=False),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_release_request")),
        )
    if _missing("fleet_roster_cache"):
        op.create_table(
            "fleet_roster_cache",
            sa.Column("gid", sa.String(length=255), nullable=False),
            sa.Column("host", sa.String(length=255), nullable=False),
            sa.Column("role", sa.String(length=32), nullable=False),
            sa.Column("delivery", sa.String(length=16), nullable=False),
            sa.Column("groups", sa.String(length=1024), nullable=False),
            sa.Column("expires_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("gid", name=op.f("pk_fleet_roster_cache")),
        )
    if _missing("fleet_turns"):
        op.create_table(
            "fleet_turns",
            sa.Column("turn_id", sa.String(length=255), nullable=False),
            sa.Column("asker", sa.String(length=255), nullable=False),
            sa.Column("asked", sa.String(length=255), nullable=False),
            sa.Column("ask_msg_id", sa.String(length=255), nullable=False),
            sa.Column("opened_ms", sa.BigInteger(), nullable=False),
            sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
            sa.Column("state", sa.String(length=16), nullable=False),
            sa.PrimaryKeyConstraint("turn_id", name=op.f("pk_fleet_turns")),
        )
    if _missing("fleet_waiters"):
        op.create_table(
            "fleet_waiters",
            sa.Column("waiter_id", sa.String(length=64), nullable=False),
            sa.Column("gid", sa.String(length=255), nullable=False),
            sa.Column("opened_ms", sa.BigInteger(), nullable=False),
            sa.Column("expires_ms", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("waiter_id", name=op.f("pk_fleet_waiters")),
        )
        op.create_index(op.f("ix_fleet_waiters_gid"), "fleet_waiters", ["gid"], unique=False)
    if _missing("outbox"):
        op.create_table(
            "outbox",
            sa.Column(
                "id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                autoincrement=True,
                nullable=False,
            ),
            sa.Column("tenant", sa.String(length=100), nullable=False),
            sa.Column("branch_key", sa.String(length=300), nullable=False),
            sa.Column("lsn", sa.BigInteger(), nullable=False),
            sa.Column("topic", sa.String(length=249), nullable=False),
            sa.Column("key", sa.LargeBinary(), nullable=True),
            sa.Column("value", sa.LargeBinary(), nullable=True),
            sa.Column("headers", sa.LargeBinary(), nullable=True),
            sa.Column("status", sa.SmallInteger(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("sent_at", sa.Float(), nullable=True),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
            sa.UniqueConstraint("tenant", "branch_key", "lsn", name="uq_outbox_branch_lsn"),
        )
        op.create_index(
            "ix_outbox_pending",
            "outbox",
            ["id"],
            unique=False,
            sqlite_where=sa.text("status = 0"),
            postgresql_where=sa.text("status = 0"),
        )
    if _missing("outbox_branch"):
        op.create_table(
            "outbox_branch",
            sa.Column("tenant", sa.String(length=100), nullable=False),
            sa.Column("branch_key", sa.String(length=300), nullable=False),
            sa.Column("last_lsn", sa.BigInteger(), nullable=False),
            sa.Column("abandoned", sa.Boolean(), nullable=False),
            sa.PrimaryKeyConstraint("tenant", "branch_key", name=op.f("pk_outbox_branch")),
        )
    if _missing("run"):
        op.create_table(
            "run",
            sa.Column("tenant", sa.String(length=100), nullable=False),
            sa.Column("run_id", sa.String(length=100), nullable=False),
            sa.Column("live_branch", sa.Integer(), nullable=False),
            sa.Column("status", sa.String(length=20), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("tenant", "run_id", name=op.f("pk_run")),
        )
    if _missing("run_branch"):
        op.create_table(
            "run_branch",
            sa.Column("tenant", sa.String(length=100), nullable=False),
            sa.Column("run_id", sa.String(length=100), nullable=False),
            sa.Column("branch", sa.Integer(), nullable=False),
            sa.Column("branch_key", sa.String(length=300), nullable=False),
            sa.Column("parent", sa.Integer(), nullable=True),
            sa.Column("fork_step", sa.Integer(), nullable=False),
            sa.Column("live", sa.Boolean(), nullable=False),
            sa.PrimaryKeyConstraint("tenant", "run_id", "branch", name=op.f("pk_run_branch")),
            sa.UniqueConstraint("branch_key", name=op.f("uq_run_branch_branch_key")),
        )
    if _missing("run_step"):
        op.create_table(
            "run_step",
            sa.Column("tenant", sa.String(length=100), nullable=False),
            sa.Column("run_id", sa.String(length=100), nullable=False),
            sa.Column("branch", sa.Integer(), nullable=False),
            sa.Column("step", sa.Integer(), nullable=False),
            sa.Column("state", sa.Text(), nullable=False),
            sa.Column("lsn", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("tenant", "run_id", "branch", "step", name=op.f("pk_run_step")),
        )


def downgrade() -> None:
    # indexes go with their tables
    for table in (
        "run_step",
        "run_branch",
        "run",
        "outbox_branch",
        "outbox",
        "fleet_waiters",
        "fleet_turns",
        "fleet_roster_cache",
        "fleet_release_request",
        "fleet_quarantine",
        "fleet_parked",
        "fleet_held",
        "fleet_forward_sends",
        "fleet_failed_reported",
        "fleet_dedupe",
    ):
        op.drop_table(table)
