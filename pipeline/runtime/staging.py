"""Writes a handler wants, staged per record and flushed per batch in ONE transaction.

A handler never touches the database directly: it stages rows (``insert``), deferred calls that
need the batch session (``call``, e.g. an outbox write that assigns an lsn), batched calls on the
batch's connection (``call_each``, e.g. settling a batch's receipts) and follow-ups that
run once the batch is through. Follow-ups are a closed type, and which kind a handler stages
decides the batch's :class:`AckMode`, that is how the runtime commits its offsets:

* :class:`AfterCommit` (``tx.after_commit``) -- an **at-most-once** effect (the forward path's
  inject, a spawn's launch). It runs only once the batch's offset commit is confirmed: a batch
  holding one commits synchronously, or, pipelined, asynchronously with the effect waiting for
  the commit's answer (``runtime/awaiting_commit.py``); on a commit error it never runs.
* :class:`AfterStore` (``tx.after_store``) -- bookkeeping that only needs the batch transaction
  to be durable (a seen-set entry, a counter). It promises nothing about the offset, so a batch
  holding only these (the pull path) commits its offsets asynchronously: a lost commit
  redelivers, and the dedupe rows absorb the redelivery. ``tx.after_store_each(fn, item)`` is
  the same kind, staged per record and run as one ``fn(items)`` per batch.

A record whose outcome is not ``Ack`` has its staging discarded (:meth:`Staged.rollback`), so a
failed record leaves no partial writes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Insert, Table, insert
from sqlalchemy.orm import Session

from pipeline.store import pg_pipeline

from .batch_session import BatchTx
from .driver_sql import execute_many

SessionCall = Callable[[Session], object]
BatchCall = Callable[[Connection, list[Any]], object]
Effect = Callable[[], None]


class AckMode(enum.StrEnum):
    """How a batch's records are acknowledged, chosen by what a duplicate costs (R-ACK-1).

    * ``AT_LEAST_ONCE`` -- pull path: make the effect durable (held row + dedupe row in one DB
      transaction), *then* commit the offset, asynchronously. A crash in between redelivers;
      dedupe absorbs it (R-ACK-2).
    * ``AT_MOST_ONCE`` -- forward path: commit the offset synchronously *before* the effect
      (inject). A crash in between loses the inject visibly (no ``INJECTED`` -> ``FAILED``),
      never duplicates it (R-ACK-3).

    A handler does not pick it: :meth:`Staged.ack_mode` derives it from the follow-ups it staged
    (an :class:`AfterCommit` makes the batch at-most-once), and the runtime's commit step
    (:mod:`pipeline.runtime.batch_commit`) is the one place it becomes a Kafka call.
    """

    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


@dataclass(frozen=True, slots=True)
class AfterCommit:
    """At-most-once: runs only once the batch's offset commit is confirmed."""

    fn: Effect


@dataclass(frozen=True, slots=True)
class AfterStore:
    """Runs once the batch transaction committed; the offset commit may still be in flight."""

    fn: Effect


@dataclass(frozen=True, slots=True)
class AfterStoreEach:
    """One item of a batched :class:`AfterStore` (:meth:`Staged.after_store_each`)."""

    fn: Callable[[list[Any]], None]
    item: Any


FollowUp = AfterCommit | AfterStore | AfterStoreEach


@dataclass(frozen=True, slots=True)
class _Each:
    """One item of a batched call (:meth:`Staged.call_each`)."""

    fn: BatchCall
    item: Any


# one compiled-once INSERT per table (SQLAlchemy caches the compiled form per construct)
_INSERTS: dict[Table, Insert] = {}


def _insert_for(table: Table) -> Insert:
    stmt = _INSERTS.get(table)
    if stmt is None:
        stmt = _INSERTS[table] = insert(table)
    return stmt


class _Lean:
    """An INSERT of one table with one set of columns, compiled once for a dialect, executed
    as DB-API ``executemany`` with parameters built here: each column's bind processor (if its
    type has one), nothing else. SQLAlchemy's generic per-row parameter construction cost more
    than the insert itself on the runtime's batch path."""

    __slots__ = ("keys", "processed", "sql")

    def __init__(self, sql: str, keys: tuple[str, ...], processors: tuple[Any, ...]) -> None:
        self.sql, self.keys = sql, keys
        # (position, processor) of the columns that have one: a held row's 12 columns have 2
        self.processed = tuple((i, proc) for i, proc in enumerate(processors) if proc is not None)

    def params(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        keys, processed = self.keys, self.processed
        if not processed:
            return [tuple([row[k] for k in keys]) for row in rows]
        out = []
        for row in rows:
            values = [row[k] for k in keys]
            for i, proc in processed:
                if values[i] is not None:
                    values[i] = proc(values[i])
            out.append(tuple(values))
        return out


# (table, dialect name, driver, column keys) -> _Lean, or None where SQLAlchemy must build the rows
_LEAN: dict[tuple[Table, str, str, tuple[str, ...]], _Lean | None] = {}


def _lean_for(table: Table, dialect: Dialect, keys: tuple[str, ...]) -> _Lean | None:
    cache_key = (table, dialect.name, dialect.driver, keys)
    if cache_key in _LEAN:
        return _LEAN[cache_key]
    lean: _Lean | None = None
    cols = table.c
    # a missing column's Python-side default is SQLAlchemy's to fill in: such rows take its path
    missing_defaults = any(
        c.default is not None or c.onupdate is not None for c in cols if c.key not in keys
    )
    if (
        all(k in cols for k in keys)
        and not missing_defaults
        and dialect.paramstyle in ("qmark", "format", "pyformat")
    ):
        if dialect.paramstyle == "pyformat":  # psycopg: SQLAlchemy names the binds (and adds
            # RETURNING of the key), so it took the generic path; positional ``%s`` it takes too
            procs = tuple(cols[k].type.dialect_impl(dialect).bind_processor(dialect) for k in keys)
            lean = _LEAN[cache_key] = _Lean(
                pg_pipeline.insert_sql(table, keys, dialect), keys, procs
            )
            return lean
        compiled = insert(table).compile(dialect=dialect, column_keys=list(keys))
        if compiled.positional and compiled.positiontup is not None:
            order = tuple(compiled.positiontup)
            if sorted(order) == sorted(keys):
                procs = tuple(
                    cols[k].type.dialect_impl(dialect).bind_processor(dialect) for k in order
                )
                lean = _Lean(compiled.string, order, procs)
    _LEAN[cache_key] = lean
    return lean


class Staged:
    """A batch's staged writes and follow-ups (see the module docstring)."""

    __slots__ = ("calls", "effects", "inserts")

    def __init__(self) -> None:
        self.inserts: list[tuple[Table, dict[str, Any]]] = []
        self.calls: list[SessionCall | _Each] = []
        self.effects: list[FollowUp] = []

    def insert(self, table: Table, row: dict[str, Any]) -> None:
        self.inserts.append((table, row))

    def call(self, fn: SessionCall) -> None:
        self.calls.append(fn)

    def call_each(self, fn: BatchCall, item: Any) -> None:
        """A call that takes many items at once: staged per item like :meth:`call`, and at
        flush each run of consecutive items for the same ``fn`` is one ``fn(connection, items)``
        on the batch transaction's connection (in staging order; a call of another kind in
        between ends the run). It needs no ORM session: a batch of these makes none. It reads
        no row the batch inserts, so those may still ride with the ``COMMIT`` on PostgreSQL."""
        self.calls.append(_Each(fn, item))

    def after_commit(self, fn: Effect) -> None:
        """An at-most-once effect: it runs only once the batch's offset commit is confirmed."""
        self.effects.append(AfterCommit(fn))

    def after_store(self, fn: Effect) -> None:
        """Bookkeeping after the batch transaction; never delays or orders the offset commit."""
        self.effects.append(AfterStore(fn))

    def after_store_each(self, fn: Callable[[list[Any]], None], item: Any) -> None:
        """Bookkeeping like :meth:`after_store`, staged per item and run per batch: each run of
        consecutive items for the same ``fn`` is one ``fn(items)`` (a seen-set entry and a
        counter per record become one lock and one increment per batch)."""
        self.effects.append(AfterStoreEach(fn, item))

    # -- used by the runtime -------------------------------------------------------------------
    def mark(self) -> tuple[int, int, int]:
        return (len(self.inserts), len(self.calls), len(self.effects))

    def rollback(self, mark: tuple[int, int, int]) -> None:
        """Discard everything staged since ``mark`` (a record that did not end in ``Ack``)."""
        del self.inserts[mark[0] :], self.calls[mark[1] :], self.effects[mark[2] :]

    def ack_mode(self) -> AckMode:
        """``AT_MOST_ONCE`` when an effect waits for the offset commit (forward path), else
        ``AT_LEAST_ONCE``."""
        for effect in self.effects:  # per batch, over two follow-ups per held record
            if isinstance(effect, AfterCommit):
                return AckMode.AT_MOST_ONCE
        return AckMode.AT_LEAST_ONCE

    def count_after_commit(self) -> int:
        return sum(isinstance(e, AfterCommit) for e in self.effects)

    def run_effects(self, *, committed: bool, on_error: Callable[[], None]) -> None:
        """Run follow-ups in staging order; ``AfterCommit`` ones only if ``committed``; a run
        of :meth:`after_store_each` items for the same ``fn`` as one call."""
        run: list[Any] = []
        run_fn: Callable[[list[Any]], None] | None = None
        for effect in self.effects:
            if isinstance(effect, AfterStoreEach):
                if run_fn is not None and effect.fn != run_fn:
                    _run_each(run_fn, run, on_error)
                    run = []
                run_fn = effect.fn
                run.append(effect.item)
                continue
            if run_fn is not None:
                _run_each(run_fn, run, on_error)
                run, run_fn = [], None
            if isinstance(effect, AfterCommit) and not committed:
                continue
            try:
                effect.fn()
            except Exception:  # noqa: BLE001 - one failed follow-up never stops the others
                on_error()
        if run_fn is not None:
            _run_each(run_fn, run, on_error)

    def run_after_commit(self, *, on_error: Callable[[], None]) -> None:
        """Run only the ``AfterCommit`` follow-ups, in staging order: a pipelined commit's
        batch ran its others with ``run_effects(committed=False)`` when it was handled
        (``runtime/awaiting_commit.py``)."""
        for effect in self.effects:
            if isinstance(effect, AfterCommit):
                try:
                    effect.fn()
                except Exception:  # noqa: BLE001 - one failed follow-up never stops the others
                    on_error()

    def flush(self, tx: BatchTx | Session) -> None:
        """Bulk-insert rows table by table (one ``executemany`` per table and column set), then
        run calls in staging order (a run of :meth:`call_each` items as one call, on the
        transaction's connection). :meth:`call` calls get an ORM session: a :class:`BatchTx`
        makes one only for them."""
        groups: dict[tuple[Table, tuple[str, ...]], list[dict[str, Any]]] = {}
        for table, row in self.inserts:
            group = (table, tuple(row))
            rows = groups.get(group)
            if rows is None:
                groups[group] = [row]
            else:
                rows.append(row)
        if groups:
            conn = tx.connection()
            # nothing of this batch reads them back (a call_each reads none of them)
            deferrable = all(isinstance(call, _Each) for call in self.calls)
            for (table, keys), rows in groups.items():
                lean = _lean_for(table, conn.dialect, keys)
                if lean is None:
                    conn.execute(_insert_for(table), rows)
                else:
                    execute_many(conn, lean.sql, lean.params(rows), deferrable=deferrable)
        if not self.calls:
            return
        run: list[Any] = []
        run_fn: BatchCall | None = None
        for call in self.calls:
            if isinstance(call, _Each):
                if run_fn is not None and call.fn != run_fn:
                    run_fn(tx.connection(), run)
                    run = []
                run_fn = call.fn
                run.append(call.item)
                continue
            if run_fn is not None:
                run_fn(tx.connection(), run)
                run, run_fn = [], None
            call(tx if isinstance(tx, Session) else tx.session)
        if run_fn is not None:
            run_fn(tx.connection(), run)

    def writes(self) -> bool:
        """Whether the batch staged any row or call (a write beside its dedupe claims)."""
        return bool(self.inserts or self.calls)

    def empty(self) -> bool:
        return not (self.inserts or self.calls or self.effects)


def _run_each(
    fn: Callable[[list[Any]], None], items: list[Any], on_error: Callable[[], None]
) -> None:
    try:
        fn(items)
    except Exception:  # noqa: BLE001 - one failed follow-up never stops the others
        on_error()
