"""The inject queue's transactions: a burst's journal rows opened, then closed with its receipts.

At a few hundred briefs a second a burst is a brief or two, so each brief pays two small
transactions (docs/gateway.md, "The inject journal"), and what SQLAlchemy wraps around them cost
more CPU than their statements: a pooled connection checked out and reset per transaction, and an
ORM ``Session`` (its transaction object, connection lookups, commit events) only for the outbox
write of the receipt. Here the journal's statements and the receipts' outbox rows run on a
``Connection`` (their own DB-API statements, :mod:`pipeline.host.inject_journal`,
:func:`pipeline.outbox.write`), with no ``Session``:

* **SQLite** -- one connection held for every inject worker of the gateway, one transaction at a
  time on it. SQLite has one writer anyway: the store's write gate queues every write
  transaction of the process (``BEGIN IMMEDIATE`` behind it), so the lock costs no concurrency,
  and the pool never lends more connections to the queue than one, however many entities inject.
  Each transaction is ``BEGIN IMMEDIATE`` ... ``COMMIT`` on the DB-API connection itself, queued
  on the store's write gate like every writer of the process, as the socket's group commits are
  (``gateway/writer_session.py``): SQLAlchemy's transaction on the connection is begun once, when
  it is opened, and never ended while held, so SQLAlchemy issues nothing per transaction (its
  transaction objects, events and the generator around them cost about as much as the journal's
  statements, at two transactions per brief). A DB-API error is raised as SQLAlchemy raises it.
  Between transactions it holds none (no lock, no snapshot). A transaction that raised drops the
  connection (its state is not known); the next one takes a fresh one.
* **PostgreSQL** -- a pooled connection per transaction, as the workers run concurrently there;
  ``BEGIN`` rides with the first statement, the rest with the ``COMMIT``
  (:mod:`pipeline.store.pg_pipeline`), and the relay's ``NOTIFY`` with the ``COMMIT`` too.
* a session factory bound to anything but an engine (a test's connection): its own ``Session``.

No ``Session`` means no ``after_commit`` wake: the queue wakes its relay itself once the
transaction that staged receipts has committed (``InjectionQueue.on_receipts``), after handing it
the receipts' rows (:meth:`JournalTx.hand_over`): the relay ships them without reading them back
(docs/outbox.md, invariant 10).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.outbox.notify import CHANNEL, wakes_in_process
from pipeline.outbox.wake import collect, collected, committed_rows
from pipeline.store import pg_pipeline
from pipeline.store.engine import WriteGate, end_on_dbapi

_NOTIFY = f"NOTIFY {CHANNEL}"


class JournalTx:
    """Transactions for the inject journal and its receipts (see the module doc)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        bind = sessions.kw.get("bind")
        self._engine = bind if isinstance(bind, Engine) else None
        self._pg = self._engine is not None and self._engine.dialect.name == "postgresql"
        self._lock = threading.Lock()
        self._held: Connection | None = None
        self._raw: Any = None  # the DB-API connection under _held
        self._gate: WriteGate | None = None
        self._sqlite = _HeldTx(self) if self._engine is not None and not self._pg else None
        self._local = threading.local()  # fed: the _Fed the thread's last begin() committed

    def begin(self) -> contextlib.AbstractContextManager[Session | Connection]:
        """One transaction, committed on leaving, rolled back on an exception."""
        if self._sqlite is not None:
            return self._sqlite
        return self._begin()

    @contextlib.contextmanager
    def _begin(self) -> Iterator[Session | Connection]:
        self._local.fed = None
        engine = self._engine
        if engine is None:
            with self.sessions.begin() as s:
                yield s
            return
        with pg_pipeline.transaction(engine) as conn, _collecting(conn) as fed:
            yield conn
        self._local.fed = fed  # committed: its COMMIT returned

    def hand_over(self) -> None:
        """Hand the outbox rows the thread's last :meth:`begin` committed to the relay of this
        process (``outbox.wake.committed_rows``); the caller wakes the relay next."""
        fed: _Fed | None = getattr(self._local, "fed", None)
        self._local.fed = None
        if fed is not None and fed.rows and self._engine is not None:
            committed_rows(self._engine, fed.rows, trusted=fed.trusted)

    def open_now(self) -> contextlib.AbstractContextManager[Session | Connection]:
        """The transaction of a burst's journal opens: on PostgreSQL one autocommitted
        statement (no ``BEGIN``, no ``COMMIT``: one round trip); elsewhere :meth:`begin`."""
        if self._pg and self._engine is not None:
            return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self.begin()

    @staticmethod
    def notify(tx: Session | Connection) -> None:
        """Receipts were staged in ``tx``: on PostgreSQL, wake a relay in another process at
        its commit (what :func:`pipeline.outbox.write` does for a ``Session``)."""
        if not isinstance(tx, Connection) or not pg_pipeline.on_postgresql(tx):
            return  # a Session notifies itself; SQLite's relay is woken in process
        if wakes_in_process(tx):
            return  # the gateway's relay: the queue wakes it after the commit (on_receipts)
        if not pg_pipeline.defer(tx, _NOTIFY, [()]):
            tx.exec_driver_sql(_NOTIFY)

    def close(self) -> None:
        """Give the held connection back to the pool (the queue's stop)."""
        with self._lock:
            self._drop()

    def _open(self, engine: Engine) -> Connection:
        """The held SQLite connection, with SQLAlchemy's transaction begun once (through the
        engine's begin event: the gate and ``BEGIN IMMEDIATE``) and ended here on the DB-API
        connection: from now on each transaction begins and ends there (:class:`_HeldTx`)."""
        conn = engine.connect()
        try:
            conn.begin()
            raw, gate = end_on_dbapi(engine, conn)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        self._held, self._raw, self._gate = conn, raw, gate
        return conn

    def _call(self, sql: str, fn: Any, *args: Any) -> None:
        """``fn(*args)``, a DB-API error raised as SQLAlchemy raises it (``with_retry`` and the
        callers catch SQLAlchemyError)."""
        assert self._engine is not None
        dialect = self._engine.dialect
        error = dialect.loaded_dbapi.Error
        try:
            fn(*args)
        except error as exc:
            raise DBAPIError.instance(sql, (), exc, error, dialect=dialect) from exc

    def _drop(self) -> None:
        conn, self._held = self._held, None
        self._raw = self._gate = None
        if conn is not None:
            with contextlib.suppress(Exception):  # a dead connection is discarded by the pool
                conn.close()


class _HeldTx:
    """:meth:`JournalTx.begin` on SQLite: one transaction on the held connection, ``BEGIN
    IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an exception) on its DB-API connection, queued on
    the write gate, under the queue's lock. Its own ``__enter__`` / ``__exit__``, not a generator
    context manager: two transactions per brief, and the generator's frames cost as much as
    ``BEGIN`` and ``COMMIT``."""

    __slots__ = ("_tx",)

    def __init__(self, tx: JournalTx) -> None:
        self._tx = tx

    def __enter__(self) -> Connection:
        tx = self._tx
        tx._local.fed = None
        tx._lock.acquire()
        try:
            held = tx._held
            if held is None or held.closed or held.invalidated:
                assert tx._engine is not None
                held = tx._open(tx._engine)
            raw, gate = tx._raw, tx._gate
            if gate is not None:
                gate.enter(raw)
            try:
                tx._call("BEGIN IMMEDIATE", raw.execute, "BEGIN IMMEDIATE")
            except BaseException:
                if gate is not None:
                    gate.leave(raw)
                raise
            collect(held)
        except BaseException:
            tx._drop()
            tx._lock.release()
            raise
        return held

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        tx = self._tx
        try:
            held = tx._held
            raw, gate = tx._raw, tx._gate
            rows, trusted = collected(held) if held is not None else ([], False)
            try:
                if kind is None:
                    tx._call("COMMIT", raw.commit)
                else:
                    with contextlib.suppress(Exception):
                        raw.rollback()
            except BaseException:
                with contextlib.suppress(Exception):
                    raw.rollback()
                tx._drop()
                raise
            finally:
                if gate is not None:
                    gate.leave(raw)
            if kind is not None:
                tx._drop()  # its state is not known: the next transaction takes a fresh one
                return
            if rows:
                fed = _Fed()
                fed.rows, fed.trusted = rows, trusted
                tx._local.fed = fed  # committed: its COMMIT returned
        finally:
            tx._lock.release()


class _Fed:
    """The outbox rows a transaction wrote on its connection, once it left without an error."""

    __slots__ = ("rows", "trusted")

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.trusted = False  # True: none was written inside a savepoint


@contextlib.contextmanager
def _collecting(conn: Connection) -> Iterator[_Fed]:
    """Note the outbox rows written on ``conn`` in the block (``outbox.wake.collect``); the
    noting stops on leaving, either way."""
    fed = _Fed()
    collect(conn)
    try:
        yield fed
    finally:
        fed.rows, fed.trusted = collected(conn)
