"""Marking confirmed rows sent: the relay's only write -- one per branch, not one per row.

R-OUT-4: "ack only what the broker accepted". The ack raises the branch's watermark
``outbox_sent.sent_lsn`` from ``lo - 1`` to ``hi`` for the run ``[lo, hi]`` of rows the broker
confirmed. The prefix guard is inside the statement (:mod:`.ack_sql`): the watermark moves only
from ``lo - 1`` (never past an unconfirmed row: a run whose ``lo - 1`` is not yet sent is not
acked at all), only upwards (a late or repeated ack never lowers it), and never on an abandoned
branch (a row a rewind dropped while it was in flight stays ``DROPPED``; the drop was decided
first).

The ack runs on the DB-API connection of one held connection (:mod:`.held`). At a few hundred
rows a second a relay pass acks a row or three, and SQLAlchemy's connection and transaction
objects and the pool's checkout and reset around them cost several times the statement itself
(measured per ack, CPU: SQLite ~55 against ~13 µs, PostgreSQL client 148 against 36 µs). On
SQLite the ack is one transaction, queued on the store's write gate
(:func:`~pipeline.store.engine.write_gate`) like every writer of the process, then ``BEGIN
IMMEDIATE``, the updates, ``COMMIT``; elsewhere one autocommitted statement per branch.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError
from pipeline.store import pg_pipeline
from pipeline.store.engine import write_gate

from .ack_sql import ack_params, ack_statements
from .held import HeldConnection

Branch = tuple[str, str]


def runs(rows: list[Any]) -> dict[Branch, tuple[int, int]]:
    """Per branch, ``(lo, hi)``: the first and last lsn of its rows in ``rows`` (lsn order)."""
    out: dict[Branch, tuple[int, int]] = {}
    for row in rows:
        branch = (row[1], row[2])
        first = out.get(branch)
        out[branch] = (row[3] if first is None else first[0], row[3])
    return out


class Acker:
    """Acks confirmed rows by moving their branches' watermarks."""

    def __init__(self, engine: Engine, *, tenant: str | None = None) -> None:
        self.engine = engine
        self.tenant = tenant
        self._sql = ack_statements(engine.dialect.name, engine.dialect.paramstyle)
        # PostgreSQL: one transaction per branch, so the ack never holds two branches' rows
        # (all branches in one round trip, their commits not waiting for the WAL flush).
        # SQLite: one writer at a time, so one transaction per batch.
        self._one_per_statement = engine.dialect.name != "sqlite"
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        self._conn = HeldConnection(engine)  # no transaction open on it between acks
        self._lock = threading.Lock()  # one ack at a time on it, whichever thread acks

    def ack(self, rows: list[Any]) -> None:
        """Raise each branch's watermark over its run of ``rows`` (confirmed, lsn order)."""
        if not rows:
            return
        params = ack_params(runs(rows).items())
        try:
            with self._lock:
                self._ack(params)
        except (SQLAlchemyError, self._dbapi_error) as exc:
            # Not acked: these rows go out again; the consumer's fold drops the copies.
            raise StoreError(f"outbox relay: cannot ack {len(rows)} rows: {exc}") from exc

    def _ack(self, params: list[Any]) -> None:
        try:
            conn = self._conn.get()
            raw: Any = conn.dbapi_connection
            if self._one_per_statement:  # autocommit while held: each branch its own transaction
                # all in one round trip, not waiting for the WAL flush: a lost ack only re-sends
                pg_pipeline.each_without_flush_raw(raw, self._sql[0], params)
            else:
                self._transaction(raw, params)
        except BaseException:
            self._conn.drop()  # its state is not known: the next ack takes a fresh one
            raise

    def _transaction(self, raw: Any, params: list[Any]) -> None:
        """SQLite: the updates in one write transaction, queued on the write gate first."""
        gate = write_gate(self.engine)
        if gate is not None:
            gate.enter(raw)
        try:
            raw.execute("BEGIN IMMEDIATE")
            try:
                for sql in self._sql:
                    raw.executemany(sql, params)
                raw.execute("COMMIT")
            except BaseException:
                raw.execute("ROLLBACK")
                raise
        finally:
            if gate is not None:
                gate.leave(raw)

    def close(self) -> None:
        """Give the held connection back to the pool (the relay's close)."""
        with self._lock:
            self._conn.close()
