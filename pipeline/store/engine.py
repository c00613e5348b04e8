"""Engine factory for SQLite (WAL, the embedded default) and PostgreSQL (by URL).

Every table in the package registers on :data:`metadata`; the schema itself is built by the Alembic
revisions (:mod:`pipeline.store.schema`): a fresh store is created at head, any other store must
already be at head (``fleet store upgrade``). SQLite
gets WAL, ``synchronous=NORMAL`` (durable across process crashes, which is what kill -9 tests),
a busy timeout, and foreign keys on.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import weakref
from typing import Any, Protocol

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from . import wal_checkpoint
from .version import at_head

log = logging.getLogger(__name__)

READONLY_OPTION = "fleet_readonly"
# a pooled PostgreSQL connection idle longer than this is pinged before use (see ping_when_idle)
PING_IDLE_S = 1.0

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def make_engine(
    url: str, *, create: bool = True, background_checkpoint: bool = True, **kwargs: Any
) -> Engine:
    """Build an engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    ``create`` runs the start-up schema check: a fresh store is brought to head, a store behind
    head raises ``STORE_SCHEMA_OUTDATED`` (see :func:`pipeline.store.schema.ensure_schema`). A
    store already at head is recognised with one query, without Alembic (:mod:`.version`).
    ``background_checkpoint``: a SQLite file's WAL is checkpointed by the process's checkpoint
    thread, not in a writer's ``COMMIT`` (:mod:`.wal_checkpoint`).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {"timeout": 30, "check_same_thread": False})
        engine = create_engine(url, **kwargs)
        # the file the checkpoint thread looks after (None: SQLite's own checkpoints)
        checkpointed = sqlite_file(parsed.database) if background_checkpoint else None

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy own transactions: pysqlite's implicit BEGIN defers the write lock
            # and breaks SAVEPOINT; we begin explicitly (below) instead.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            if checkpointed is not None:  # the checkpoint thread's; this is the writers' fallback
                cur.execute(f"PRAGMA wal_autocheckpoint={wal_checkpoint.FALLBACK_FRAMES}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # IMMEDIATE takes the write lock up front: two processes (gateway and relay) never
            # deadlock upgrading a read lock, they wait on busy_timeout instead. Read-only
            # sessions (see read_sessions) begin DEFERRED and never wait for writers (WAL).
            if conn.get_execution_options().get(READONLY_OPTION, False):
                _begin_on_driver(conn, "BEGIN")
                return
            gate = _GATES.get(conn.engine.pool)
            if gate is None:
                _begin_on_driver(conn, "BEGIN IMMEDIATE")
                return
            dbapi_conn = conn.connection.dbapi_connection
            gate.enter(dbapi_conn)
            try:
                _begin_on_driver(conn, "BEGIN IMMEDIATE")
            except BaseException:
                gate.leave(dbapi_conn)
                raise

        if checkpointed is not None:
            checkpointer = wal_checkpoint.CHECKPOINTER
            real = checkpointer.register(checkpointed, engine)

            @event.listens_for(engine, "commit")
            def _nudge(_conn: Any) -> None:
                checkpointer.nudge(real)

            @event.listens_for(engine, "engine_disposed")
            def _release(_engine: Any) -> None:
                checkpointer.release(real)

    else:
        engine = create_engine(url, **kwargs)
        if "pool_pre_ping" not in kwargs:  # a caller's own choice stands
            ping_when_idle(engine)
    if create:
        try:
            if not at_head(readonly(engine)):
                # Alembic loads only here: a store that is fresh, behind or ahead of this code
                from .schema import ensure_schema

                ensure_schema(engine)
        except BaseException:
            engine.dispose()  # a refused store must not leave pooled connections behind
            raise
    return engine


def sqlite_file(database: str | None) -> str | None:
    """A SQLite URL's database as a file path, or None where there is no plain file to share
    with other connections and processes (in memory, or a ``file:`` URI)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database


def _begin_on_driver(conn: Any, sql: str) -> None:
    """``BEGIN`` on the DB-API connection itself: every transaction starts here, and
    ``exec_driver_sql`` built an execution context and a result for a statement that returns
    nothing. A driver error is wrapped by the connection's own handling, as there."""
    try:
        conn.connection.dbapi_connection.execute(sql)
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, (), None, None)


def ping_when_idle(engine: Engine, idle_s: float = PING_IDLE_S) -> Engine:
    """Replace a dead pooled connection before use, like ``pool_pre_ping``, but ping only a
    connection that sat in the pool longer than ``idle_s``: one checked in a moment ago (the
    consume loop's previous batch) is used at once. ``pool_pre_ping`` pings on every checkout,
    a round trip per transaction on the hot path. A connection that dies within ``idle_s`` of
    its last use fails its statement instead, as one that dies right after a ping always
    could: the error is a disconnect, the pool is invalidated and the caller's retry (or the
    batch's backoff) takes a fresh connection (:mod:`pipeline.store.retry`)."""

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["fleet_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("fleet_idle_since", None)
        if since is None or time.monotonic() - since < idle_s:
            return  # a fresh connection, or one in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # the pool drops this connection and checks out another
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc

    return engine


class _WriteGate:
    """The write transactions on one SQLite file, queued (see :func:`serialize_writes`): first
    on a lock of this process, then on an ``flock`` of a file beside the database, which every
    gated process on that file takes too. The holder is the DBAPI connection in a write
    transaction: its commit or rollback (or its return to the pool mid-transaction) lets the
    next one in -- of this process or of another, woken by the kernel at once instead of
    SQLite's busy handler sleeping 1, 2, 5, 10 ms between tries."""

    def __init__(self, wait_s: float, fd: int | None = None) -> None:
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._holder: Any = None
        self._thread: int | None = None
        self._fd = fd  # the lock file beside the database (None: this process only)

    def enter(self, dbapi_conn: Any) -> None:
        if self._thread == threading.get_ident():
            return  # this thread writes already (another connection): SQLite decides, as before
        # bounded: past the wait the writer meets SQLite's own busy timeout, as without the gate
        if self._lock.acquire(timeout=self.wait_s):
            self._lock_file()
            self._holder, self._thread = dbapi_conn, threading.get_ident()

    def leave(self, dbapi_conn: Any) -> None:
        raw = getattr(dbapi_conn, "dbapi_connection", dbapi_conn)  # the pool passes its wrapper
        if raw is not None and raw is self._holder:
            self._holder = self._thread = None
            self._unlock_file()
            self._lock.release()

    def _lock_file(self) -> None:
        """Blocks while a gated writer of another process holds it. Not bounded here: the
        holder keeps it only for one write transaction, itself bounded by SQLite's busy
        timeout, and a process that dies (kill -9) drops its lock with its file descriptor."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def _unlock_file(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


_GATES: weakref.WeakKeyDictionary[Any, _WriteGate] = weakref.WeakKeyDictionary()
# one gate per database file in a process: a thread writing through one engine and then,
# nested, through another on the same file is not queued behind itself (nor its flock)
_FILE_GATES: weakref.WeakValueDictionary[str, _WriteGate] = weakref.WeakValueDictionary()


def _gate_for(engine: Engine, wait_s: float, *, across_processes: bool) -> _WriteGate:
    database = sqlite_file(engine.url.database)
    if not across_processes or database is None:
        return _WriteGate(wait_s)
    path = os.path.realpath(database)
    gate = _FILE_GATES.get(path)
    if gate is None:
        try:
            fd: int | None = os.open(path + "-writers", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a read-only directory: this process's writers only, as before
            log.warning("SQLite write gate: no lock file beside %s", path, exc_info=True)
            fd = None
        gate = _FILE_GATES[path] = _WriteGate(wait_s, fd)
        if fd is not None:
            weakref.finalize(gate, os.close, fd)
    return gate


def serialize_writes(
    engine: Engine, *, wait_s: float = 30.0, across_processes: bool = False
) -> Engine:
    """SQLite: queue write transactions before ``BEGIN IMMEDIATE`` -- this process's on an
    in-process lock, and with ``across_processes`` (pool members: processes on one file) also
    on an ``flock`` of ``<database>-writers`` that every such process takes (a no-op on other
    databases); returns ``engine``.

    SQLite allows one writer. Without the gate, writers that write often (pool members' step
    claims and results beside their batch transactions, on one file) wait in SQLite's busy
    handler, which sleeps 1, 2, 5, 10, ... ms between tries: a wait for a lock held 1 ms costs
    3 ms or more. Behind the gate a waiting writer starts as soon as the holder's COMMIT (or
    ROLLBACK) has run. Processes that do not use the gate on the same file still meet SQLite's
    lock and busy timeout, as before; read-only transactions (:func:`readonly`) never queue."""
    if engine.dialect.name != "sqlite" or engine.pool in _GATES:
        return engine
    gate = _GATES[engine.pool] = _gate_for(engine, wait_s, across_processes=across_processes)
    dialect = engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_conn: Any) -> None:
        try:
            commit(dbapi_conn)
        finally:
            gate.leave(dbapi_conn)

    def do_rollback(dbapi_conn: Any) -> None:
        try:
            rollback(dbapi_conn)
        finally:
            gate.leave(dbapi_conn)

    # after the statement, not in the commit/rollback events (those run before it)
    setattr(dialect, "do_commit", do_commit)  # noqa: B010
    setattr(dialect, "do_rollback", do_rollback)  # noqa: B010

    @event.listens_for(engine, "reset")
    def _reset(dbapi_conn: Any, _record: Any, _state: Any) -> None:
        gate.leave(dbapi_conn)  # back in the pool with its transaction still open

    return engine


class WriteGate(Protocol):
    """The write gate of an engine (see :func:`serialize_writes`), for a writer that begins and
    ends its transactions on the DB-API connection itself: ``enter`` before ``BEGIN IMMEDIATE``,
    ``leave`` after its ``COMMIT`` or ``ROLLBACK``."""

    def enter(self, dbapi_conn: Any) -> None: ...

    def leave(self, dbapi_conn: Any) -> None: ...


def write_gate(engine: Engine) -> WriteGate | None:
    """The gate :func:`serialize_writes` put on ``engine`` (None: its writes are not gated)."""
    return _GATES.get(engine.pool)


def end_on_dbapi(engine: Engine, conn: Connection) -> tuple[Any, WriteGate | None]:
    """``conn`` has begun through the engine (its begin event: the gate taken, ``BEGIN
    IMMEDIATE`` on SQLite): end that transaction on the DB-API connection and leave the gate,
    so that from now on the holder begins and ends its transactions there (the socket's held
    writer, the inject journal's). Returns the DB-API connection and the gate (None: not
    gated). On PostgreSQL nothing was begun: the commit is a no-op."""
    raw = conn.connection.dbapi_connection
    assert raw is not None  # a checked-out connection has one
    gate = write_gate(engine)
    try:
        raw.commit()
    finally:
        if gate is not None:
            gate.leave(raw)
    return raw, gate


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def readonly(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions begin DEFERRED on SQLite: for pure reads.

    Under WAL a reader never waits for a writer; a read that took the write lock (IMMEDIATE)
    would queue every writer behind it, and SQLite's busy handler sleeps in coarse steps.
    """
    return engine.execution_options(**{READONLY_OPTION: True})


def read_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions for reads only: on SQLite they take no write lock (BEGIN DEFERRED under WAL)."""
    return sessionmaker(readonly(engine), expire_on_commit=False)
