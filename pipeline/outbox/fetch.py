"""The relay's hot read: the branches with unsent rows, then the rows after the oldest of them.

A row stays ``PENDING`` after it was sent (the ack moves its branch's watermark instead), so a
pass first lists the branches with unsent rows -- the partial index ``ix_outbox_branch_unsent``,
as many entries as active branches -- with each one's watermark and the id of its first unsent
row (one point read each on the unique index). It then reads rows in id order from the lowest
of those ids, as the relay always has, and keeps per branch only the unbroken run after its
mark: lsns are gapless and commit in order (docs/outbox.md, inv. 2), so a branch's next row is
always ``mark + 1``. A row at or below its mark was sent already (another branch's row read on
the way) and is skipped; a row past ``mark + 1`` (on PostgreSQL a lower id can commit late) or of
a branch not listed ends that branch for this pass -- the next pass lists it again. Both
statements run on the raw DB-API cursor (plain tuples; SQLAlchemy's ``Row`` objects cost about
four times the read itself), through :class:`OutboxReader`.

On PostgreSQL both reads are index reads whatever the planner's statistics say (``READ_PLAN``,
set on the reader's connection). A table not analyzed yet -- a new store, for up to a minute
of autovacuum's nap, or longer where autovacuum lags -- gives the planner no histogram of ids,
and it read "id from here, in order, 1,000 at most" as a scan of the whole table and a sort:
1.0 ms a read at 10,000 rows against 0.14 once analyzed, growing with the table, at every
pass and every safety-net look.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Engine

from pipeline.store import pg_pipeline

from .held import HeldConnection
from .tables import RowStatus, unsent

# The columns of a fetched row, in order (the relay indexes the tuples by position).
COLUMNS = ("id", "tenant", "branch_key", "lsn", "topic", "key", "value", "headers", "created_at")

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}

Branch = tuple[str, str]

# the planner settings of the reader's connection (PostgreSQL): index scans, in index order
READ_PLAN = {"enable_seqscan": "off", "enable_bitmapscan": "off"}


class FetchSql:
    """Builds the two statements of the read: active branches, and rows after an id."""

    def __init__(self, paramstyle: str, *, tenant: str | None, limit: int) -> None:
        try:
            p = self._p = _PLACEHOLDERS[paramstyle]
        except KeyError:
            raise ValueError(
                f"outbox relay: unsupported DB-API paramstyle {paramstyle!r}"
            ) from None
        self._tenant = tenant
        self.limit = int(limit)
        own = "" if tenant is None else f" AND tenant = {p}"
        # a range of the primary key from the id (the row is read there, no index in between)
        self._rows = (
            f"SELECT {', '.join(COLUMNS)} FROM outbox WHERE status = {int(RowStatus.PENDING)}"
            f" AND id >= {p}{own} ORDER BY id LIMIT {self.limit}"
        )
        # the watermark is in outbox_sent (tables.py), joined to the index's branches
        own_b = "" if tenant is None else f" AND b.tenant = {p}"
        self._branches = (
            "SELECT b.tenant, b.branch_key, s.sent_lsn, (SELECT o.id FROM outbox o "
            "WHERE o.tenant = b.tenant AND o.branch_key = b.branch_key "
            "AND o.lsn = s.sent_lsn + 1) FROM outbox_branch b JOIN outbox_sent s "
            f"ON s.tenant = b.tenant AND s.branch_key = b.branch_key WHERE {unsent('b')}{own_b}"
        )

    def branches(self) -> tuple[str, tuple[object, ...]]:
        """``(sql, params)`` listing ``(tenant, branch_key, sent_lsn, id of lsn sent_lsn + 1)``
        of the branches with unsent rows (the index's own condition, as the index states it)."""
        return self._branches, (() if self._tenant is None else (self._tenant,))

    def rows(self, start: int) -> tuple[str, tuple[object, ...]]:
        """``(sql, params)`` for up to ``limit`` rows from id ``start`` on, in id order."""
        return self._rows, ((start,) if self._tenant is None else (start, self._tenant))


class PassCursor:
    """One relay pass's place: the next id to read, and per branch the last lsn handed out."""

    def __init__(
        self,
        sql: FetchSql,
        listed: Iterable[Any],
        stopped: set[Branch],
        ahead: Mapping[Branch, int] | None = None,
    ) -> None:
        self._sql = sql
        self.gaps = False  # a branch ended at a gap: rows may be left unsent after this pass
        # branch -> last lsn handed out: starts at its watermark, or past it at the rows the
        # relay holds confirmed and not yet acked (``ahead``, :mod:`.ack_later`); stopped
        # branches left out
        self.marks: dict[Branch, int] = {}
        firsts = []
        for tenant, branch, sent_lsn, first_id in listed:
            if first_id is not None and (tenant, branch) not in stopped:
                mark = int(sent_lsn)
                if ahead:
                    mark = max(mark, ahead.get((tenant, branch), mark))
                self.marks[(tenant, branch)] = mark
                firsts.append(int(first_id))
        self._next: int | None = min(firsts) if firsts else None

    def next_batch(self, cur: Any, stopped: set[Branch]) -> list[Any]:
        """Up to ``limit`` rows in id order: each branch's next lsns after its mark."""
        marks = self.marks
        for branch in stopped.intersection(marks):
            del marks[branch]  # a stopped branch publishes nothing more
        limit = self._sql.limit
        rows: list[Any] = []
        while self._next is not None and marks and len(rows) < limit:
            cur.execute(*self._sql.rows(self._next))
            read = cur.fetchall()
            self._next = read[-1][0] + 1 if len(read) == limit else None  # None: the end
            for row in read:
                branch = (row[1], row[2])
                mark = marks.get(branch)
                if mark is None or row[3] <= mark:
                    continue  # not listed (or ended) this pass, or sent already
                if row[3] != mark + 1:
                    del marks[branch]  # a gap: an earlier lsn is not visible yet
                    self.gaps = True
                    continue
                marks[branch] = row[3]
                rows.append(row)
                if len(rows) == limit:
                    self._next = row[0] + 1
                    break
        if self._next is None:
            marks.clear()  # read to the end: every listed branch is done for this pass
        return rows


class OutboxReader:
    """The relay's reads: a pass's branch listing, then its batches, on the DB-API cursor of one
    held connection (:mod:`.held`: no transaction, so no snapshot, between reads)."""

    def __init__(self, engine: Engine, sql: FetchSql) -> None:
        self._sql = sql
        self._conn = HeldConnection(engine, settings=READ_PLAN)
        self._wire = engine.dialect.name == "postgresql"  # libpq's pipeline, not a cursor
        self.cursor: PassCursor | None = None  # the current pass's place (None: start a pass)

    def read(
        self, *, first: bool, stopped: set[Branch], ahead: Mapping[Branch, int] | None = None
    ) -> list[Any]:
        """The next batch; ``first`` starts a pass (lists the branches again; ``ahead``: per
        branch the lsn the relay confirmed up to, past its stored watermark). A failed read
        raises the driver's error (or SQLAlchemy's) and the next read starts a new pass."""
        try:
            held = self._conn.get()
            cur = WireCursor(held.dbapi_connection) if self._wire else held.cursor()
            if first or self.cursor is None:
                cur.execute(*self._sql.branches())
                self.cursor = PassCursor(self._sql, cur.fetchall(), stopped, ahead)
            rows = self.cursor.next_batch(cur, stopped)
            cur.close()
        except BaseException:
            self.cursor = None
            self._conn.drop()
            raise
        return rows

    def drained(self) -> bool:
        """The current pass read every unsent row of its branches (nothing left behind a gap)."""
        return self.cursor is not None and not self.cursor.marks and not self.cursor.gaps

    def close(self) -> None:
        self._conn.close()


class WireCursor:
    """As much of a DB-API cursor as the reads use, on PostgreSQL: each statement sent on
    libpq's pipeline (:func:`pipeline.store.pg_pipeline.all_rows`, one flush, one wait, no
    psycopg cursor), its rows the tuples a cursor's ``fetchall`` gives. The held connection is
    in autocommit: no ``BEGIN`` goes with a read."""

    __slots__ = ("_dbapi", "_rows")

    def __init__(self, dbapi: Any) -> None:
        self._dbapi = dbapi
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        self._rows = pg_pipeline.all_rows(self._dbapi, sql, params)

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def close(self) -> None:
        self._rows = []
