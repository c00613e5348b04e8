"""The batch transaction, on one connection the runtime holds across batches; an ORM session
only for the batches that ask for one.

A batch at a few hundred messages a second is a record or three: taking a pooled connection and
giving it back per batch (the checkout, the pool's reset on return, on PostgreSQL a ping) cost
more CPU than the batch's own statements. The consume loop keeps one connection and runs each
batch's transaction on it: one transaction per batch as before, with the same isolation and, on
SQLite, the same write gate (``BEGIN IMMEDIATE`` ... ``COMMIT`` on that connection). A batch
whose transaction raised drops the connection (it may be dead: a store restart), and the next
batch takes a fresh one from the pool.

Most batches never need the ORM: the dedupe claim and the staged rows run on the connection's
DB-API cursor (``driver_sql.py``), and a held REPLY stages nothing else. An ORM ``Session`` (its
transaction object, its connection lookups, its commit's flush and events) cost about as much as
those statements, so :class:`BatchTx` makes one only when a step asks for it (a staged call, an
outbox write, a quarantine park). That session, from the runtime's own session factory, takes
over the transaction already begun (``join_transaction_mode="control_fully"``) and commits it
itself, so its ``after_commit`` listeners (the relay's wake, the quarantine cache) run once the
batch is durable, as before.

On PostgreSQL a batch is two round trips where it was four: ``BEGIN`` with the dedupe claim,
and the staged rows with the ``COMMIT`` (:mod:`pipeline.store.pg_pipeline`).

On SQLite a batch begins and ends on the DB-API connection, as the socket's writer does
(:mod:`pipeline.gateway.writer_session`): SQLAlchemy's transaction objects, its ``begin``
event and its commit path cost ~15 µs per batch, more than ``BEGIN IMMEDIATE`` and ``COMMIT``
themselves. SQLAlchemy's transaction on the held connection is begun (through the engine's
``begin`` event: the write gate, ``BEGIN IMMEDIATE``) and left open at its level while the
DB-API transaction is committed under it; each later batch queues on the store's write gate
(:func:`~pipeline.store.engine.write_gate`), sends ``BEGIN IMMEDIATE`` and ``COMMIT`` itself
and leaves the gate after it. Between batches the connection holds no DB-API transaction (no
WAL snapshot kept open, every other writer's commit seen at the next ``BEGIN``). A batch that
made an ORM session commits through it (its ``after_commit`` listeners run as before), which
ends SQLAlchemy's transaction too: the next batch begins through SQLAlchemy again. A DB-API
error is raised as SQLAlchemy raises it, and the connection is dropped as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, RootTransaction
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import pg_pipeline
from pipeline.store.engine import WriteGate, write_gate


class InTransaction(Protocol):
    """Anything with the batch transaction's connection: a :class:`BatchTx`, or a ``Session``."""

    def connection(self) -> Connection: ...


class BatchTx:
    """One batch's transaction: its connection at once, an ORM session on first use."""

    __slots__ = ("_conn", "_session", "_sessions")

    def __init__(
        self,
        sessions: sessionmaker[Session],
        conn: Connection | None,
        session: Session | None = None,
    ) -> None:
        self._sessions = sessions
        self._conn = conn
        self._session = session

    def connection(self) -> Connection:
        """The transaction's connection (statements on it are in the batch transaction)."""
        conn = self._conn
        if conn is None:
            conn = self._conn = self.session.connection()
        return conn

    @property
    def session(self) -> Session:
        """An ORM session in the batch transaction, made the first time a step asks."""
        session = self._session
        if session is None:
            session = self._session = self._sessions(
                bind=self._conn, join_transaction_mode="control_fully"
            )
            session.connection()  # joined now: its commit is the batch's even if it ran nothing
        return session

    def _flush(self) -> None:
        if self._session is not None:
            self._session.flush()

    def _commit(self, trans: RootTransaction) -> None:
        session = self._session
        if session is None:
            trans.commit()
            return
        with session:  # closed after: it commits the connection's transaction, then its events
            session.commit()

    def _rollback(self, trans: RootTransaction) -> None:
        session = self._session
        if session is None:
            trans.rollback()
            return
        with session:
            session.rollback()


class BatchSessions:
    """``begin()``: a :class:`BatchTx` on a held connection (see the module doc)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        bind = sessions.kw.get("bind")
        # a factory bound to anything but an engine (a connection, nothing) is used as it is
        self._engine = bind if isinstance(bind, Engine) else None
        self._conn: Connection | None = None
        self._sqlite = self._engine is not None and self._engine.dialect.name == "sqlite"
        self._raw: Any = None  # SQLite: the DB-API connection under _conn
        self._gate: WriteGate | None = None
        self._tx: BatchTx | None = None  # SQLite: the batch under way

    def begin(self) -> contextlib.AbstractContextManager[BatchTx]:
        """A batch transaction: committed on leaving, rolled back on an exception."""
        if self._sqlite:
            return self  # ``__enter__`` / ``__exit__``: the DB-API transaction (module doc)
        return self._begin()

    # -- SQLite: the batch's transaction on the DB-API connection ----------------------------
    def __enter__(self) -> BatchTx:
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._open()
        if conn.in_transaction():  # SQLAlchemy's, held open: the batch begins on the driver
            raw, gate = self._raw, self._gate
            if gate is not None:
                gate.enter(raw)
            try:
                raw.execute("BEGIN IMMEDIATE")
            except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
                if gate is not None:
                    gate.leave(raw)
                try:
                    conn._handle_dbapi_exception(exc, "BEGIN IMMEDIATE", (), None, None)
                finally:
                    self.close()
        else:  # through the engine's begin event: the write gate, BEGIN IMMEDIATE
            try:
                conn.begin()
            except BaseException:
                self.close()
                raise
        tx = self._tx = BatchTx(self.sessions, conn)
        return tx

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        tx, self._tx = self._tx, None
        assert tx is not None
        session = tx._session
        if kind is None:
            try:
                if session is None:
                    self._end("COMMIT", self._raw.commit)  # SQLAlchemy's stays open
                else:  # ends SQLAlchemy's transaction too: its listeners run after the COMMIT
                    with session:
                        session.commit()
                return
            except BaseException:
                self._drop(session)
                raise
        self._drop(session)

    def _open(self) -> Connection:
        """Check a connection out and hold it, with no DB-API transaction open."""
        self.close()
        assert self._engine is not None
        conn = self._conn = self._engine.connect()
        self._raw = conn.connection.dbapi_connection
        self._gate = write_gate(self._engine)
        return conn

    def _end(self, sql: str, fn: Callable[[], None]) -> None:
        """``COMMIT`` (or ``ROLLBACK``) on the DB-API connection; the gate is left either way."""
        raw, gate, conn = self._raw, self._gate, self._conn
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
            assert conn is not None
            conn._handle_dbapi_exception(exc, sql, (), None, None)
        finally:
            if gate is not None:
                gate.leave(raw)

    def _drop(self, session: Session | None) -> None:
        """A failed batch: rolled back, and its connection given up (its state is not known:
        the next batch starts on a fresh one)."""
        try:
            if session is not None:
                with session:
                    session.rollback()
            elif self._raw is not None:
                self._end("ROLLBACK", self._raw.rollback)
        except Exception:  # noqa: BLE001 - the connection is discarded just below
            pass
        finally:
            self.close()

    # -- any other store: SQLAlchemy's transaction per batch ---------------------------------
    @contextlib.contextmanager
    def _begin(self) -> Iterator[BatchTx]:
        if self._engine is None:
            with self.sessions.begin() as session:
                yield BatchTx(self.sessions, None, session)
            return
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            self.close()
            conn = self._conn = self._engine.connect()
        pg = pg_pipeline.on_postgresql(conn)
        try:
            trans = conn.begin()
            if pg:  # BEGIN rides with the claim, the staged rows with the COMMIT
                pg_pipeline.enable(conn)
            tx = BatchTx(self.sessions, conn)
            try:
                yield tx
                if pg:
                    tx._flush()  # anything the ORM still holds goes before the COMMIT
                    pg_pipeline.commit(conn)
            except BaseException:
                tx._rollback(trans)
                raise
            tx._commit(trans)
        except BaseException:
            if pg:
                pg_pipeline.disable(conn)
            self.close()  # its state is not known: the next batch starts on a fresh one
            raise
        if pg:
            pg_pipeline.disable(conn)

    def close(self) -> None:
        """Give the held connection back to the pool (the runtime's close; after a failure)."""
        conn, self._conn = self._conn, None
        self._raw = self._gate = None
        if conn is not None:
            with contextlib.suppress(Exception):  # a dead connection is discarded by the pool
                conn.close()
