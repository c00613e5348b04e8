"""Hot-path statements as DB-API text, run on the raw cursor of the caller's session.

A send reads the roster mirror and writes a tracking row in the send's own transaction. Through
``session.execute`` each statement pays SQLAlchemy's per-call compile-cache lookup, parameter
processing and result wrapping, several times what SQLite spends on the SQL itself (measured on
the socket's group commit). Here a statement is plain SQL text, formatted once per DB-API
``paramstyle``, and executed on the cursor of the session's own connection: the same
transaction, the same rows, one round trip per statement. A DB-API error is raised as
SQLAlchemy would raise it (``DBAPIError.instance``), so callers that catch ``SQLAlchemyError``
(the store's retry) see no difference. ``pipeline.outbox.writer`` does the same for its two
statements.

A periodic duty's look-first read (maintenance's "is anything due?", twice a second) runs on a
:class:`HeldReader` instead: one DB-API connection the duty keeps, no session, no pool checkout.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from pipeline.errors import ConfigError
from pipeline.store import pg_pipeline

_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}


class Statement:
    """One SQL text with ``{p}`` for each parameter (and ``{true}`` / ``{false}`` literals),
    formatted once per paramstyle."""

    __slots__ = ("_by_style", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._by_style: dict[str, str] = {}

    def for_style(self, paramstyle: str) -> str:
        sql = self._by_style.get(paramstyle)
        if sql is None:
            p = _PLACEHOLDER.get(paramstyle)
            if p is None:
                raise ConfigError(f"store: unsupported DB-API paramstyle {paramstyle!r}")
            sqlite = paramstyle == "qmark"
            sql = self._by_style[paramstyle] = self.text.format(
                p=p, true="1" if sqlite else "true", false="0" if sqlite else "false"
            )
        return sql


HELD = "fleet_dbapi"
"""``session.info`` key: ``(DB-API connection, dialect)`` of the connection under the session's
transaction, set for each transaction by whoever holds that connection (the socket's writer);
then a statement skips ``session.connection()`` (SQLAlchemy's transaction bookkeeping)."""


def _connection(session: Session) -> tuple[Any, Any]:
    held = session.info.get(HELD)
    if held is not None:
        return held  # type: ignore[no-any-return]
    conn = session.connection()
    return conn.connection.dbapi_connection, conn.dialect


def execute(session: Session, statement: Statement, params: Sequence[Any]) -> Any:
    """Run ``statement`` with ``params`` in ``session``'s transaction; returns the DB-API cursor
    (fetch from it at once)."""
    raw, dialect = _connection(session)
    sql = statement.for_style(dialect.paramstyle)
    try:
        cursor = raw.cursor()
        cursor.execute(sql, tuple(params))
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect
        ) from exc
    return cursor


class Later:
    """Writes of one transaction whose answer nobody reads, kept to go with the transaction's
    next round trip (PostgreSQL: the socket group's tracking rows go with its outbox rows,
    ``outbox.writer.write_branch``'s ``before``), by statement in the order first kept."""

    __slots__ = ("_kept", "_style")

    def __init__(self, paramstyle: str) -> None:
        self._style = paramstyle
        self._kept: dict[str, list[tuple[Any, ...]]] = {}

    def add(self, statement: Statement, params: Sequence[Any]) -> None:
        self._kept.setdefault(statement.for_style(self._style), []).append(tuple(params))

    def statements(self) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """What was kept, as ``(SQL, parameter rows)``."""
        return list(self._kept.items())


def later_for(session: Session) -> Later | None:
    """A :class:`Later` for ``session``'s transaction on PostgreSQL, where each statement is a
    round trip; None elsewhere (a statement costs no round trip: run it at once)."""
    dialect = _connection(session)[1]
    return Later(dialect.paramstyle) if dialect.name == "postgresql" else None


class HeldReader:
    """One DB-API connection a periodic duty keeps checked out for its look-first reads, each a
    statement in a transaction of its own (SQLite: autocommit; elsewhere rolled back at once, no
    snapshot kept between two reads).

    Why not a read session per look: a look that finds nothing due is most ticks of an idle
    gateway, and through a session it builds a ``Session``, checks a connection out of the pool
    and back (a rollback), ~170 µs of CPU against ~6 µs for the statement on a kept
    connection. On a host that remaps a process's pages while it sleeps (measured on a
    Firecracker VM: ~24 µs per 4 KiB page first touched after half a second asleep,
    docs/performance.md) the session's path, first run after the tick's 0.5 s sleep, cost
    22 ms of CPU per look against 3 ms. A connection that fails is dropped and the read
    tried once more on a fresh one (a restarted PostgreSQL); a second failure is raised as
    SQLAlchemy would raise it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect
        self._conn: Any = None  # the pool's proxy of the kept DB-API connection
        self._lock = threading.Lock()  # the duty's thread; a test may call from its own

    def fetchone(self, statement: Statement, params: Sequence[Any]) -> Any:
        """The first row ``statement`` returns (a tuple), or None."""
        sql = statement.for_style(self._dialect.paramstyle)
        with self._lock:
            tries = 2 if self._conn is not None else 1  # a kept one that fails: once more, fresh
            for left in range(tries - 1, -1, -1):
                try:
                    return self._read(sql, params)
                except self._dialect.loaded_dbapi.Error as exc:
                    self._drop()
                    if not left:
                        raise DBAPIError.instance(
                            sql,
                            params,
                            exc,
                            self._dialect.loaded_dbapi.Error,
                            dialect=self._dialect,
                        ) from exc
            raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, sql: str, params: Sequence[Any]) -> Any:
        if self._conn is None:
            self._conn = self._engine.raw_connection()
        cursor = self._conn.cursor()
        try:
            cursor.execute(sql, tuple(params))
            row = cursor.fetchone()
        finally:
            cursor.close()
        if self._dialect.name != "sqlite":  # SQLite's connections are in autocommit
            self._conn.rollback()
        return row

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.invalidate()  # never back to the pool: it failed

    def close(self) -> None:
        """Give the connection back to the pool (the engine's ``dispose`` then closes it)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()


def fetchone(session: Session | HeldReader, statement: Statement, params: Sequence[Any]) -> Any:
    """The first row ``statement`` returns (a tuple), or None (on PostgreSQL as
    :func:`fetchall` runs it; elsewhere only the first row is fetched). On a
    :class:`HeldReader`, its own statement."""
    if isinstance(session, HeldReader):
        return session.fetchone(statement, params)
    if _connection(session)[1].name == "postgresql":
        rows = fetchall(session, statement, params)
        return rows[0] if rows else None
    cursor = execute(session, statement, params)
    try:
        return cursor.fetchone()
    finally:
        cursor.close()


def fetchall(session: Session, statement: Statement, params: Sequence[Any]) -> list[Any]:
    """Every row ``statement`` returns (tuples). On PostgreSQL the statement goes on libpq's
    connection directly (:func:`pipeline.store.pg_pipeline.all_rows`): the first statement of
    a transaction (the socket group's roster read) rides with its ``BEGIN``, one round trip
    where a psycopg cursor waits for the ``BEGIN``'s answer first."""
    raw, dialect = _connection(session)
    if dialect.name != "postgresql":
        cursor = execute(session, statement, params)
        try:
            return list(cursor.fetchall())
        finally:
            cursor.close()
    sql = statement.for_style(dialect.paramstyle)
    try:
        return pg_pipeline.all_rows(raw, sql, tuple(params))
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect
        ) from exc
