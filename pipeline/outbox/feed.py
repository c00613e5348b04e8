"""The relay fed from the writer's commit: committed rows handed over in memory, not read back.

At a few hundred rows a second a gateway's relay pass ships a row or three, and reading them
back (the branch listing, then the rows by id) cost about as much as producing them. So a
writer in the relay's process hands its rows over once its transaction committed
(:mod:`.wake`: :func:`~pipeline.outbox.write` notes each row it inserted in the session, the
commit hands the list over), and the relay produces them as they are.

The store stays the truth; the hand-off is only a short cut, taken when it is exactly the next
unsent rows of each branch (docs/outbox.md, invariants 2 and 4):

* the relay knows, per branch, the last lsn it saw confirmed (:class:`Known`); a handed-over
  row is used only when its lsn is that one plus one (several rows of a branch: consecutive).
  Lsns are gapless and commit in order, and the hand-off comes after the commit, so such a row
  is the branch's next unsent row, committed, with the content the store holds;
* a row at or below that lsn was sent already (a read got there first) and is dropped;
* anything else -- a branch the relay has not seen confirmed since it started, a gap (the
  rows of two commits handed over out of order), a repeated lsn, a stopped branch, rows written
  inside a savepoint (it may have rolled back alone), a full hand-off queue, a wake with
  nothing handed over -- makes the pass read the store instead, which finds every committed
  row, these included. So does a failed pass, start-up, and every wait that ends without a
  wake (another process's commit, SQLite's ``data_version``, PostgreSQL's ``NOTIFY``).

A row's id comes with its insert (SQLite's ``lastrowid``, PostgreSQL's ``RETURNING id, lsn``).
A writer on a bare connection (no ``Session``) collects its rows and hands them over once its
own ``COMMIT`` returned (:func:`.wake.collect`, :func:`.wake.committed_rows`).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

Branch = tuple[str, str]

MAX_ROWS = 2_000  # beyond this the hand-off is dropped and the relay reads the store


class Feed:
    """Rows committed in this process, handed to the relay (writers put, the relay takes)."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._rows: deque[Any] = deque()
        self._usable = True  # False: something handed over cannot be used; read the store
        self._local = threading.local()

    def put(self, rows: list[Any], *, trusted: bool, by_committer: bool = False) -> None:
        """``rows`` just committed (``trusted``: none written inside a savepoint).
        ``by_committer``: the committing thread wakes the relay next (:meth:`woken_by_put`)."""
        if not trusted or len(self._rows) + len(rows) > self.max_rows:
            self._usable = False
        else:
            self._rows.extend(rows)
        if by_committer:
            self._local.put = True

    def woken_by_put(self) -> bool:
        """True once after this thread's :meth:`put` (``by_committer``): its wake is for rows
        handed over already, so it does not ask for a read."""
        if getattr(self._local, "put", False):
            self._local.put = False
            return True
        return False

    def take(self) -> list[Any] | None:
        """Everything handed over since the last take, or ``None`` when some of it cannot be
        used (the pass reads the store, which has all of it)."""
        rows = self._rows
        out = []
        while rows:
            out.append(rows.popleft())
        if not self._usable:
            self._usable = True
            return None
        return out


class Known:
    """Per branch, the last lsn the relay saw the broker confirm (acked or kept to ack)."""

    __slots__ = ("lsns",)

    def __init__(self) -> None:
        self.lsns: dict[Branch, int] = {}

    def confirmed(self, rows: list[Any]) -> None:
        lsns = self.lsns
        if len(lsns) > 10_000:
            lsns.clear()  # only a short cut: a branch not known is read
        for row in rows:
            lsns[(row[1], row[2])] = row[3]

    def forget(self) -> None:
        self.lsns.clear()

    def next_rows(self, rows: list[Any], stopped: set[Branch]) -> list[Any] | None:
        """The rows to produce from ``rows`` (handed over, in any order): each branch's next
        lsns after its known one; ``None`` when the store must be read instead."""
        lsns = self.lsns
        rows.sort(key=_by_id)  # id order: lsn order within a branch (its writers queue)
        seen: dict[Branch, int] = {}
        out = []
        for row in rows:
            branch = (row[1], row[2])
            last = seen.get(branch)
            if last is None:
                last = lsns.get(branch)
                if last is None or branch in stopped:
                    return None  # not confirmed since start-up, or stopped: read
                if row[3] <= last:
                    continue  # sent already: a read got there first
            if row[3] != last + 1:
                return None  # a gap, or the same lsn twice: read
            seen[branch] = row[3]
            out.append(row)
        return out


def _by_id(row: Any) -> int:
    return int(row[0])
