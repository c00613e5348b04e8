"""outbox: drop ``ix_outbox_pending``, a second copy of the primary key written on every send

Since the ack watermark (revision 0012) a sent row keeps ``status = 0`` until it is purged, so
the partial index over ``status = 0`` held nearly every row the primary key holds, and each
outbox insert wrote a page of it. Its only reader, the relay's scan from an id
(``status = 0 AND id >= ? ORDER BY id``), walks the primary key instead, and reads the row
there rather than once in the index and again in the table. One B-tree page less per send.

Revision ID: 0015_outbox_no_pending_index
Revises: 0014_outbox_sent_own_row
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015_outbox_no_pending_index"
down_revision: str | None = "0014_outbox_sent_own_row"
branch_labels: str | None = None
depends_on: str | None = None

_PENDING = sa.text("status = 0")


def upgrade() -> None:
    op.drop_index("ix_outbox_pending", "outbox")


def downgrade() -> None:
    op.create_index(
        "ix_outbox_pending", "outbox", ["id"], sqlite_where=_PENDING, postgresql_where=_PENDING
    )
