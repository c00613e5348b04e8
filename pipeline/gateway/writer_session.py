"""The local socket's writer: its group commits as DB-API transactions on one held connection.

A group commit at 500 sends/s holds one to three sends, so what a transaction costs besides its
statements is paid about once per send. Through an ORM ``Session`` that was most of it: the
session's and the connection's transaction objects, their events, and ``BEGIN IMMEDIATE`` sent
through SQLAlchemy's execution path came to ~37 µs per group, where ``BEGIN IMMEDIATE`` and
``COMMIT`` on the DB-API connection cost ~3 µs (measured, empty transactions). So the socket's
committer (one thread at a time) holds one connection and one ``Session`` on it, and runs each
group as ``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK``) on the DB-API connection itself
(on PostgreSQL the driver begins at the group's first statement):

* **The same store rules.** The group still queues on the store's write gate
  (:func:`~pipeline.store.engine.write_gate`) before ``BEGIN IMMEDIATE``, like every other
  writer of the process, and leaves it after its ``COMMIT`` or ``ROLLBACK``. A DB-API error is
  raised as SQLAlchemy raises it (``DBAPIError.instance``), so callers that catch
  ``SQLAlchemyError`` see no difference.
* **The same staging code.** What a send writes is staged through the held ``Session``
  (:meth:`GatewayClient._stage`): raw-cursor statements, Core statements, savepoints
  (``begin_nested``) all run on this connection, inside the group's transaction. The session's
  own transaction is begun once, when the connection is opened, and never ended while it is
  held: SQLAlchemy issues nothing at a group's start or end. ``session.info`` is cleared at each
  group's start (what a send caches there is for its own transaction only).
* **Between groups** the connection holds no transaction, so it sees every commit of other
  writers at its next ``BEGIN`` and keeps no WAL snapshot open.

On PostgreSQL too: a checkout through the session factory per group cost its Session, its
pool checkout and its transaction objects once per send at 500 sends/s. The pool's idle ping
(:func:`~pipeline.store.engine.ping_when_idle`) is kept by hand: a held connection that sat
unused longer than ``PING_IDLE_S`` is pinged before its next group, and one that fails the ping
is dropped and replaced. After a failure that is not a refusal (a store error) the held
connection is closed (on PostgreSQL invalidated: it may be the one the server dropped) and the
next group opens a fresh one. Any other store is checked out per group as before.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import FleetError
from pipeline.host import dbapi
from pipeline.outbox import wake as outbox_wake
from pipeline.outbox import writer as outbox_writer
from pipeline.store.engine import PING_IDLE_S, WriteGate, end_on_dbapi

HELD_DIALECTS = ("sqlite", "postgresql")


class WriterSession:
    """``begin()`` like ``sessionmaker.begin()``, for one thread at a time (the socket's
    committer)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        bind = sessions.kw.get("bind")
        dialect = bind.dialect.name if isinstance(bind, Engine) else ""
        self._engine: Engine | None = bind if dialect in HELD_DIALECTS else None
        self._begin = "BEGIN IMMEDIATE" if dialect == "sqlite" else None
        self._ping = dialect == "postgresql"
        self._used = 0.0  # monotonic: when the held connection's last group ended
        self._conn: Connection | None = None
        self._session: Session | None = None
        self._raw: Any = None  # the DB-API connection under _conn
        self._gate: WriteGate | None = None
        # the DB-API's error class (``loaded_dbapi`` is a property), looked up once
        self._error: type[Exception] = (
            self._engine.dialect.loaded_dbapi.Error if self._engine is not None else Exception
        )

    def begin(self) -> contextlib.AbstractContextManager[Session]:
        """One transaction: committed when the block ends, rolled back when it raises.

        The held connection's transaction is this object's own ``__enter__`` / ``__exit__``,
        not a generator context manager: a group at 500 sends/s holds one send, and the
        generator's frames and wrappers cost as much as ``BEGIN IMMEDIATE`` and ``COMMIT``."""
        if self._engine is None:
            return self.sessions.begin()
        return self

    def __enter__(self) -> Session:
        engine = self._engine
        assert engine is not None
        if self._session is not None and self._ping:
            self._ping_if_idle()
        session = self._session if self._session is not None else self._open(engine)
        info = session.info
        info.clear()
        info[dbapi.HELD] = (self._raw, engine.dialect)  # host.dbapi's statements
        info[outbox_writer.HELD] = (self._raw, engine)  # outbox.write's
        if self._begin is not None:
            self._run(self._begin)
        return session

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is None:
            try:
                self._end(commit=True)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._end(commit=False)
                self.close(invalidate=self._ping)
                raise
            if self._session is not None:  # its outbox rows, to this process's relay
                outbox_wake.committed(self._session, self._engine)
        elif issubclass(kind, FleetError):
            try:
                self._end(commit=False)  # a refusal: rolled back, the connection is fine
            except BaseException:
                self.close()
                raise
        else:
            with contextlib.suppress(Exception):
                self._end(commit=False)
            self.close(invalidate=self._ping)

    def _ping_if_idle(self) -> None:
        """Like the pool's idle ping: a connection unused for ``PING_IDLE_S`` is pinged, and
        one the server dropped meanwhile is replaced before the group runs on it."""
        if time.monotonic() - self._used < PING_IDLE_S:
            return
        assert self._engine is not None
        dialect = self._engine.dialect
        try:
            dialect.do_ping(self._raw)
            self._raw.rollback()  # the ping's own transaction: the group begins afresh
        except dialect.loaded_dbapi.Error:
            self.close(invalidate=True)

    def _open(self, engine: Engine) -> Session:
        conn = engine.connect()
        session = Session(bind=conn, expire_on_commit=False)
        try:
            # SQLAlchemy's transaction on this connection, begun once (through the engine's
            # begin event: the gate and BEGIN IMMEDIATE) and ended here at the DB-API level;
            # from now on the groups begin and end on the DB-API connection
            session.connection()
            raw, gate = end_on_dbapi(engine, conn)
        except BaseException:
            with contextlib.suppress(Exception):
                session.close()
            with contextlib.suppress(Exception):
                conn.close()
            raise
        self._conn, self._session, self._raw, self._gate = conn, session, raw, gate
        return session

    def _run(self, sql: str) -> None:
        """``BEGIN IMMEDIATE`` on the DB-API connection, queued on the write gate first."""
        raw, gate = self._raw, self._gate
        if gate is not None:
            gate.enter(raw)
        begun = False
        try:
            self._call(sql, raw.execute, sql)
            begun = True
        finally:
            if not begun and gate is not None:
                gate.leave(raw)

    def _end(self, *, commit: bool) -> None:
        """``COMMIT`` (or ``ROLLBACK``) on the DB-API connection; the gate is left either way."""
        raw, gate = self._raw, self._gate
        self._used = time.monotonic()
        try:
            if commit:
                self._call("COMMIT", raw.commit)
            else:
                self._call("ROLLBACK", raw.rollback)
        finally:
            if gate is not None:
                gate.leave(raw)

    def _call(self, sql: str, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)``, a DB-API error raised as SQLAlchemy raises it."""
        try:
            fn(*args)
        except self._error as exc:
            assert self._engine is not None
            dialect = self._engine.dialect
            raise DBAPIError.instance(sql, (), exc, self._error, dialect=dialect) from exc

    def close(self, *, invalidate: bool = False) -> None:
        """Give the held connection back (the next ``begin`` opens another); ``invalidate``:
        discard it instead (a PostgreSQL connection that failed may be a dropped one)."""
        session, conn = self._session, self._conn
        self._session = self._conn = self._raw = self._gate = None
        if invalidate and conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()
        with contextlib.suppress(Exception):
            if session is not None:
                session.close()
        with contextlib.suppress(Exception):
            if conn is not None:
                conn.close()
