"""Dedupe: a row with a unique key, written in the same transaction as the effect.

Nothing is "processed once" by convention. At the start of the batch transaction every
``msgId`` of the batch is **claimed** with one insert-or-ignore (SQLite ``INSERT OR IGNORE``,
PostgreSQL ``ON CONFLICT DO NOTHING``, both ``RETURNING`` the ids that were new): an id that
comes back is applied by this batch, one that does not was applied before (a duplicate). Ids
claimed for records that end up not applied (dead-lettered, parked, retried) are released again
in the same transaction, so a DLQ replay or a quarantine release can still take effect once.
A crash before the commit leaves neither row nor effect (redelivery applies it); a crash after
it leaves both (redelivery finds the row and skips). There is no separate read transaction.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import BigInteger, Column, Connection, String, Table, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
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

# Insert-or-ignore per dialect, built once (the compiled form is cached by SQLAlchemy).
_CLAIM = {
    "sqlite": sqlite.insert(dedupe_table).on_conflict_do_nothing().returning(dedupe_table.c.msg_id),
    "postgresql": postgresql.insert(dedupe_table)
    .on_conflict_do_nothing()
    .returning(dedupe_table.c.msg_id),
}


def claim_ids(conn: Connection, scope: str, msg_ids: Iterable[str], now_ms: int) -> set[str]:
    """Insert a dedupe row for every id not yet applied in ``scope``; returns those ids."""
    ids = list(dict.fromkeys(msg_ids))
    if not ids:
        return set()
    stmt = _CLAIM[conn.dialect.name]
    rows = [{"scope": scope, "msg_id": i, "seen_at_ms": now_ms} for i in ids]
    return {r[0] for r in conn.execute(stmt, rows)}


def release_ids(conn: Connection, scope: str, msg_ids: Iterable[str]) -> None:
    """Drop claims of records that were not applied (same transaction as the claim)."""
    ids = list(msg_ids)
    for i in range(0, len(ids), _CHUNK):
        conn.execute(
            delete(dedupe_table).where(
                dedupe_table.c.scope == scope, dedupe_table.c.msg_id.in_(ids[i : i + _CHUNK])
            )
        )


def seen_ids(session: Session, scope: str, msg_ids: Iterable[str]) -> set[str]:
    """Which of ``msg_ids`` were applied in ``scope`` (a read; the runtime claims instead)."""
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


# one id, the pool's question before each step (built once: compiled and cache-keyed once)
_APPLIED = select(dedupe_table.c.msg_id).where(
    dedupe_table.c.scope == bindparam("d_scope"), dedupe_table.c.msg_id == bindparam("d_id")
)


def is_applied(session: Session | Connection, scope: str, msg_id: str) -> bool:
    """Whether ``msg_id`` was applied in ``scope`` (a pool member asks before a step)."""
    return session.execute(_APPLIED, {"d_scope": scope, "d_id": msg_id}).first() is not None
