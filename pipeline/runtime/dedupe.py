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
from sqlalchemy.orm import Session

from pipeline.store import metadata

from .driver_sql import fetch_column

dedupe_table = Table(
    "fleet_dedupe",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("msg_id", String(255), primary_key=True),
    Column("seen_at_ms", BigInteger, nullable=False, index=True),
)

_CHUNK = 500

# The claim is on every batch's path: DB-API SQL text with one flat parameter tuple, run on the
# driver's cursor (SQLAlchemy's per-row parameter processing and result set-up of the same
# statement cost more than the insert itself; see driver_sql.py).
_CLAIM_SQL = (
    "INSERT INTO fleet_dedupe (scope, msg_id, seen_at_ms) VALUES {values} "
    "ON CONFLICT DO NOTHING RETURNING msg_id"
)
_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}
_claim_sql_cache: dict[tuple[str, int], str] = {}


def _claim_sql(paramstyle: str, n: int) -> str:
    sql = _claim_sql_cache.get((paramstyle, n))
    if sql is None:
        p = _PLACEHOLDER.get(paramstyle)
        if p is None:
            raise ValueError(f"dedupe: unsupported DB-API paramstyle {paramstyle!r}")
        one = f"({p}, {p}, {p})"
        sql = _claim_sql_cache[(paramstyle, n)] = _CLAIM_SQL.format(values=", ".join([one] * n))
    return sql


def claim_ids(conn: Connection, scope: str, msg_ids: Iterable[str], now_ms: int) -> set[str]:
    """Insert a dedupe row for every id not yet applied in ``scope``; returns those ids.

    One multi-row insert-or-ignore per ``_CHUNK`` ids, ``RETURNING`` the ids that were new
    (SQLite >= 3.35 and PostgreSQL both spell it ``ON CONFLICT DO NOTHING RETURNING``).
    """
    ids = list(dict.fromkeys(msg_ids))
    claimed: set[str] = set()
    style = conn.dialect.paramstyle
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        params: list[object] = []
        for msg_id in chunk:
            params += (scope, msg_id, now_ms)
        claimed.update(fetch_column(conn, _claim_sql(style, len(chunk)), tuple(params)))
    return claimed


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
