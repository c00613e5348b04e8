"""Dedupe: a row with a unique key, written in the same transaction as the effect.

Nothing is "processed once" by convention: a record's ``msgId`` is looked up (one query per
batch) and, when its effect is staged, inserted as a ``(scope, msg_id)`` primary-key row in the
batch transaction. A crash before that transaction leaves neither row nor effect (redelivery
applies it); a crash after it leaves both (redelivery finds the row and skips).
Dead-lettered records get no row, so a DLQ replay can still take effect exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import BigInteger, Column, String, Table, select
from sqlalchemy.orm import Session

from pipeline.store import metadata

dedupe_table = Table(
    "fleet_dedupe",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("msg_id", String(255), primary_key=True),
    Column("seen_at_ms", BigInteger, nullable=False, index=True),
)

_CHUNK = 500


def seen_ids(session: Session, scope: str, msg_ids: Iterable[str]) -> set[str]:
    ids = list(dict.fromkeys(msg_ids))
    found: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        rows = session.execute(
            select(dedupe_table.c.msg_id).where(
                dedupe_table.c.scope == scope, dedupe_table.c.msg_id.in_(chunk)
            )
        )
        found.update(r[0] for r in rows)
    return found
