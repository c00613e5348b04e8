"""fleet_forward_sends.host: the host a tracked brief went to, whose gateway alone settles it

An ``INJECTED`` settles the tracked brief it names. Any host's gateway could sign one, so a host
could report a brief sent to another host injected. The tracking row now keeps the host the
brief was routed to; a receipt signed by another host is refused (``SIGNER_MISMATCH``). Rows
written before this revision have no host (NULL) and settle as before, from any gateway.

Revision ID: 0017_forward_sends_host
Revises: 0016_outbox_branch_active
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0017_forward_sends_host"
down_revision: str | None = "0016_outbox_branch_active"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # a nullable column with no default: a plain ALTER TABLE on both databases, no table copy
    op.add_column("fleet_forward_sends", sa.Column("host", sa.String(255), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE fleet_forward_sends DROP COLUMN host")
