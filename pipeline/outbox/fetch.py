"""The relay's hot read: the branches with unsent rows, then each one's next lsns, as DB-API SQL.

A row stays ``PENDING`` after it was sent (the ack moves its branch's watermark instead), so
the read cannot scan rows by status. It starts from the branches with unsent rows (the partial
index ``ix_outbox_branch_unsent``: as many entries as active branches) and reads each branch's
next rows on the unique index ``(tenant, branch_key, lsn)``. Lsns are gapless (docs/outbox.md,
inv. 2), so a branch's next ``q`` rows are exactly ``m < lsn <= m + q``, ``m`` the higher of its
watermark and the last lsn this pass already handed to the producer. A batch of ``n`` rows takes
``q = ceil(n / branches)`` from each: at most ``n + branches`` rows read however deep the
backlog. Both statements run on the raw DB-API cursor (plain tuples; SQLAlchemy's ``Row``
objects cost about four times the read itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .tables import UNSENT, RowStatus

# The columns of a fetched row, in order (the relay indexes the tuples by position).
COLUMNS = ("id", "tenant", "branch_key", "lsn", "topic", "key", "value", "headers", "created_at")

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}

# Branches per row statement: 3 parameters each stays under every SQLite's variable limit.
MAX_BRANCHES_PER_READ = 300

Branch = tuple[str, str]


class FetchSql:
    """Builds the two statements of the read: active branches, and the next rows of some."""

    def __init__(self, paramstyle: str, *, tenant: str | None, limit: int) -> None:
        try:
            self._p = _PLACEHOLDERS[paramstyle]
        except KeyError:
            raise ValueError(
                f"outbox relay: unsupported DB-API paramstyle {paramstyle!r}"
            ) from None
        self._tenant = tenant
        self.limit = int(limit)
        cols = ", ".join(f"o.{c}" for c in COLUMNS)
        # ``status = 0`` excludes FAILED and DROPPED rows (their branches are skipped anyway)
        self._rows = (
            "WITH v(t, b, m) AS (VALUES {values}) "
            f"SELECT {cols} FROM v JOIN outbox o ON o.tenant = v.t AND o.branch_key = v.b "
            "AND o.lsn > v.m AND o.lsn <= v.m + {q} "
            f"WHERE o.status = {int(RowStatus.PENDING)} ORDER BY o.id"
        )

    def branches(self) -> tuple[str, tuple[object, ...]]:
        """``(sql, params)`` listing ``(tenant, branch_key, sent_lsn)`` of branches with unsent
        rows (the index's own condition, written as in the index so both databases use it)."""
        sql = f"SELECT tenant, branch_key, sent_lsn FROM outbox_branch WHERE {UNSENT}"
        if self._tenant is None:
            return sql, ()
        return f"{sql} AND tenant = {self._p}", (self._tenant,)

    def rows(self, marks: Iterable[tuple[Branch, int]], q: int) -> tuple[str, tuple[object, ...]]:
        """``(sql, params)`` for the rows ``m < lsn <= m + q`` of each ``((tenant, branch), m)``."""
        params: list[object] = []
        for (tenant, branch), m in marks:
            params += (tenant, branch, m)
        p = self._p
        values = ", ".join([f"({p}, {p}, {p})"] * (len(params) // 3))
        return self._rows.format(values=values, q=int(q)), tuple(params)


class PassCursor:
    """One relay pass's place in every active branch: the last lsn read, per branch."""

    def __init__(self, sql: FetchSql, marks: dict[Branch, int]) -> None:
        self._sql = sql
        self.marks = marks  # branch -> last lsn handed out (starts at its watermark)

    def next_batch(self, cur: Any, stopped: set[Branch]) -> list[Any]:
        """Up to ``limit`` rows, each branch's next ones in lsn order, the batch in id order."""
        rows: list[Any] = []
        limit = self._sql.limit
        while len(rows) < limit:
            for branch in stopped.intersection(self.marks):
                del self.marks[branch]  # a stopped branch publishes nothing more
            if not self.marks:
                break
            rows += self._quantum(cur, limit - len(rows))
        return rows

    def _quantum(self, cur: Any, n: int) -> list[Any]:
        marks = self.marks
        chunk = list(marks.items())[:MAX_BRANCHES_PER_READ]
        q = -(-n // len(chunk))
        cur.execute(*self._sql.rows(chunk, q))
        # Keep each branch's unbroken run from its mark: a row that is not PENDING (FAILED, or
        # DROPPED by a rewind just now) ends the branch for this pass, nothing after it is sent.
        expected = {branch: m + 1 for branch, m in chunk}
        ended: set[Branch] = set()
        run: list[Any] = []
        for row in cur.fetchall():
            branch = (row[1], row[2])
            if branch in ended:
                continue
            if row[3] != expected[branch]:
                ended.add(branch)
                continue
            expected[branch] = row[3] + 1
            run.append(row)
        rows = run[:n]
        for row in rows:  # id order is lsn order within a branch
            marks[(row[1], row[2])] = row[3]
        going_on = {(row[1], row[2]) for row in run[n:]}  # read but not taken: next batch
        for branch, m in chunk:
            if branch not in going_on and (branch in ended or expected[branch] - m - 1 < q):
                del marks[branch]  # read to its end (or its gap): none left for this pass
        return rows
