"""fleet_inject_journal: partial indexes on the open rows and on the closed ones

The journal's full indexes on ``state`` and ``closed_ms`` took two entries more per brief than
their readers need: a row's open takes an entry in each (``open``, a NULL close) and its close
moves both (the old entry deleted, the new one written, often in another page). Their readers
look only at open rows (a restart's report, by age; the gauge of briefs being injected) or only
at closed ones (retention's purge, by close). Two partial indexes serve them: the open rows by
``opened_ms``, the closed rows by ``closed_ms``; a row enters the first at its open, leaves it at
its close and enters the second then. Measured on SQLite (a journal holding 50,000 closed rows,
one brief's open and close, each its own transaction, 4,000 briefs): 95-102 µs of CPU per brief
before, 80-83 after.

Revision ID: 0018_journal_partial_indexes
Revises: 0017_forward_sends_host
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0018_journal_partial_indexes"
down_revision: str | None = "0017_forward_sends_host"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE = "fleet_inject_journal"
_OPEN = sa.text("state = 'open'")
_CLOSED = sa.text("closed_ms IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_fleet_inject_journal_open", _TABLE, ["opened_ms"],
        sqlite_where=_OPEN, postgresql_where=_OPEN,
    )  # fmt: skip
    op.create_index(
        "ix_fleet_inject_journal_closed", _TABLE, ["closed_ms"],
        sqlite_where=_CLOSED, postgresql_where=_CLOSED,
    )  # fmt: skip
    op.drop_index("ix_fleet_inject_journal_state", _TABLE)
    op.drop_index("ix_fleet_inject_journal_closed_ms", _TABLE)


def downgrade() -> None:
    op.create_index("ix_fleet_inject_journal_closed_ms", _TABLE, ["closed_ms"])
    op.create_index("ix_fleet_inject_journal_state", _TABLE, ["state"])
    op.drop_index("ix_fleet_inject_journal_closed", _TABLE)
    op.drop_index("ix_fleet_inject_journal_open", _TABLE)
