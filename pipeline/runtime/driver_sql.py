"""Statements of the batch path run on the DB-API cursor, errors still SQLAlchemy's.

The batch transaction's own statements (the dedupe claim, the staged rows' ``executemany``) are
SQL text compiled once with flat parameters. ``Connection.exec_driver_sql`` still builds an
execution context, a result object and its metadata per call, which cost more CPU than the
statement itself at a record or three per batch. Here the statement runs on the connection's
DB-API cursor directly, inside the transaction SQLAlchemy began; a DB-API error goes through the
connection's own handling (wrapped as a ``DBAPIError``, a disconnect invalidates the connection),
so a caller still sees a ``SQLAlchemyError`` and the batch backs off as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from pipeline.store import pg_pipeline


def fetch_column(conn: Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Run ``sql`` once and return the first column of every row it returns (on PostgreSQL,
    as a batch transaction's first statement, in one round trip with its ``BEGIN``)."""
    first = pg_pipeline.begin_with(conn, sql, params)
    if first is not None:
        return first
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
    finally:
        cursor.close()


def execute_many(
    conn: Connection, sql: str, rows: Sequence[Sequence[Any]], *, deferrable: bool = False
) -> None:
    """Run ``sql`` once per parameter row (the driver's ``executemany``). ``deferrable``: no
    later statement of the transaction reads these rows, so on PostgreSQL they may ride with
    its ``COMMIT`` (:mod:`pipeline.store.pg_pipeline`)."""
    if deferrable and pg_pipeline.defer(conn, sql, rows):
        return
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.executemany(sql, rows)
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, rows, cursor, None)
    finally:
        cursor.close()
