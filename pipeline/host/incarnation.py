"""This host's incarnation: a start count kept in the gateway's store (docs/presence.md "Order").

Each gateway start takes one, strictly greater than every earlier one of its host, in one
transaction (SQLite's write lock, a PostgreSQL row lock), so two processes starting on one store
(a twin with the same host id) take two different values, the later start the greater. Its
presence records carry it signed, and peers order one host's records by ``(incarnation, ts)``:
a gateway restarted with its clock behind outranks whatever its previous run wrote.

The wall clock plays no part while the store remembers. What a store that remembers nothing
(new, or wiped) starts from:

* above the highest incarnation of this host the caught-up roster holds (``seen``): a wiped
  store of a host whose records are still on the roster, or a twin on another store;
* and at least the wall clock in seconds: after an orderly stop the compacted roster keeps only
  tombstones (no incarnation), yet a long-running peer remembers the last one; seconds since the
  epoch are above any count started from them earlier, unless that host restarted more than once
  a second on average since, or its clock is now behind by more than the time that passed.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import BigInteger, Column, String, Table, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import metadata
from pipeline.support.clock import now_ms

incarnation_table = Table(
    "fleet_incarnation",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("incarnation", BigInteger, nullable=False),
    Column("started_ms", BigInteger, nullable=False),  # wall clock of that start (for operators)
)


def take_incarnation(
    sessions: sessionmaker[Session],
    host: str,
    *,
    seen: int = 0,
    clock_ms: Callable[[], int] = now_ms,
) -> int:
    """The next incarnation of ``host``: ``max(stored, seen) + 1``; a store without a row for
    ``host`` starts at ``max(seen + 1, wall clock seconds)``. Committed before it is returned."""
    try:
        return _take(sessions, host, seen, clock_ms())
    except IntegrityError:  # two first starts on one PostgreSQL store: the other inserted first
        return _take(sessions, host, seen, clock_ms())


def _take(sessions: sessionmaker[Session], host: str, seen: int, now: int) -> int:
    t = incarnation_table
    with sessions.begin() as s:
        # the UPDATE first: it takes the row's lock, so a concurrent start waits and reads ours
        s.execute(
            update(t)
            .where(t.c.host == host)
            .values(incarnation=t.c.incarnation + 1, started_ms=now)
        )
        stored = s.execute(select(t.c.incarnation).where(t.c.host == host)).scalar_one_or_none()
        if stored is None:
            taken = max(seen + 1, now // 1000)
            s.execute(insert(t).values(host=host, incarnation=taken, started_ms=now))
        elif stored <= seen:
            taken = seen + 1
            s.execute(update(t).where(t.c.host == host).values(incarnation=taken))
        else:
            taken = int(stored)
    return taken
