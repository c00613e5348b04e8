"""The batch transaction's session, on one connection the runtime holds across batches.

A batch at a few hundred messages a second is a record or three: taking a pooled connection and
giving it back per batch (the checkout, the pool's reset on return, on PostgreSQL a ping) cost
more CPU than the batch's own statements. The consume loop keeps one connection and opens each
batch's session on it: one transaction per batch as before, with the same isolation and, on
SQLite, the same write gate (``BEGIN IMMEDIATE`` ... ``COMMIT`` on that connection). A batch
whose transaction raised drops the connection (it may be dead: a store restart), and the next
batch takes a fresh one from the pool.

On PostgreSQL a batch is two round trips where it was four: ``BEGIN`` with the dedupe claim,
and the staged rows with the ``COMMIT`` (:mod:`pipeline.store.pg_pipeline`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import pg_pipeline


class BatchSessions:
    """``begin()`` like ``sessionmaker.begin()``, on a held connection (see the module doc)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        bind = sessions.kw.get("bind")
        # a factory bound to anything but an engine (a connection, nothing) is used as it is
        self._engine = bind if isinstance(bind, Engine) else None
        self._conn: Connection | None = None

    @contextlib.contextmanager
    def begin(self) -> Iterator[Session]:
        """A session in a transaction: committed on leaving, rolled back on an exception."""
        if self._engine is None:
            with self.sessions.begin() as session:
                yield session
            return
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            self.close()
            conn = self._conn = self._engine.connect()
        pg = pg_pipeline.on_postgresql(conn)
        try:
            with self.sessions(bind=conn) as session, session.begin():
                if pg:  # BEGIN rides with the claim, the staged rows with the COMMIT
                    pg_pipeline.enable(conn)
                yield session
                if pg:
                    session.flush()  # anything the ORM still holds goes before the COMMIT
                    pg_pipeline.commit(conn)
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
