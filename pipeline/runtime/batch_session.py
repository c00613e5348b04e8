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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from sqlalchemy import Connection, Engine, RootTransaction
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import pg_pipeline


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

    @contextlib.contextmanager
    def begin(self) -> Iterator[BatchTx]:
        """A batch transaction: committed on leaving, rolled back on an exception."""
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
        if conn is not None:
            with contextlib.suppress(Exception):  # a dead connection is discarded by the pool
                conn.close()
