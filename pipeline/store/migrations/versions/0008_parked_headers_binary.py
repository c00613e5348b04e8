"""fleet_parked.headers: JSON of base64 pairs -> the one binary form (pipeline.record_headers)

The outbox and the held store always kept headers in the binary pack; the quarantine's parked
records kept JSON ``[[name, base64(value)], ...]`` in a TEXT column. One stored form means one
codec: every parked row is converted here, in the upgrade's transaction, so no reader has to
know the old form. The old form's decoder lives only in this file (frozen).

Revision ID: 0008_parked_headers_binary
Revises: 0007_spawn_stops
Create Date: 2026-12-01
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

from pipeline.record_headers import pack_headers, unpack_headers

revision: str = "0008_parked_headers_binary"
down_revision: str | None = "0007_spawn_stops"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE = "fleet_parked"


def _from_json(text: str) -> list[tuple[str, bytes]]:
    return [(str(k), base64.b64decode(v)) for k, v in json.loads(text)]


def _to_json(headers: list[tuple[str, bytes]]) -> str:
    return json.dumps([[k, base64.b64encode(v).decode("ascii")] for k, v in headers])


def _convert(old_type: Any, new_type: Any, fn: Callable[[Any], Any]) -> None:
    """Add ``headers_new``, fill it row by row with ``fn(headers)``, swap it in (order kept)."""
    op.add_column(_TABLE, sa.Column("headers_new", new_type, nullable=True))
    parked = sa.table(
        _TABLE,
        sa.column("id", sa.Integer()),
        sa.column("headers", old_type),
        sa.column("headers_new", new_type),
    )
    conn = op.get_bind()
    for row_id, value in conn.execute(sa.select(parked.c.id, parked.c.headers)).all():
        conn.execute(parked.update().where(parked.c.id == row_id).values(headers_new=fn(value)))
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column("headers")
        batch.alter_column(
            "headers_new", new_column_name="headers", existing_type=new_type, nullable=False
        )


def upgrade() -> None:
    _convert(sa.Text(), sa.LargeBinary(), lambda text: pack_headers(_from_json(text)))


def downgrade() -> None:
    _convert(sa.LargeBinary(), sa.Text(), lambda blob: _to_json(unpack_headers(blob)))
