"""PostgreSQL: planner statistics for a table as soon as it holds enough rows to need them.

A table PostgreSQL has never analyzed has no statistics on its columns, and until autovacuum's
first ``ANALYZE`` (its nap is a minute; longer where it lags) the planner guesses. For the hot
path's point reads the guess is a scan of the whole table: the sender's lookup of the
``fleet_forward_sends`` rows a batch of receipts is about (``msg_id = ANY(...)``, a primary-key
read) ran as a sequential scan 919 times out of 1,704 in the first 20 s of a new store at 500
briefs/s, 0.5 ms each on average and growing with the table.

:class:`FirstStatistics` is a maintenance duty: at most every ``every_s`` it lists the given
tables that have no statistics yet (no row in ``pg_stats``) and are at least ``min_bytes`` on
disk, and runs ``ANALYZE`` on each, with a short ``lock_timeout`` (a table autovacuum is working
on is left to it, and asked again at the next look). What it never does:

* analyze a table again once it has statistics (autovacuum keeps them from then on), nor a table
  this process analyzed once already;
* analyze a table whose owner's role it does not have (``ANALYZE`` would skip it with a warning
  in the server's log at every look);
* analyze a small table (an empty one analyzed would still have no column statistics);
* anything on SQLite, whose planner reads these statements by their indexes without statistics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Engine, text

log = logging.getLogger(__name__)

DEFAULT_MIN_BYTES = 128 * 1024  # 16 pages: from here a scan costs more than an index read
DEFAULT_EVERY_S = 5.0

_WITHOUT = text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY(:names)"
    " AND pg_relation_size(c.oid) >= :min_bytes AND pg_has_role(c.relowner, 'MEMBER')"
    " AND NOT EXISTS (SELECT 1 FROM pg_stats s"
    " WHERE s.schemaname = n.nspname AND s.tablename = c.relname)"
    " ORDER BY c.relname"
)


class FirstStatistics:
    """Analyzes each of ``tables`` once it reaches ``min_bytes`` without statistics (see the
    module doc). :meth:`tick` is the duty; on any store but PostgreSQL it does nothing."""

    def __init__(
        self,
        engine: Engine,
        tables: Sequence[str],
        *,
        min_bytes: int = DEFAULT_MIN_BYTES,
        every_s: float = DEFAULT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.tables = sorted(set(tables))
        self.min_bytes = min_bytes
        self.every_s = every_s
        self._clock = clock
        self._next = 0.0
        self._done: set[str] = set()
        self.enabled = engine.dialect.name == "postgresql" and bool(self.tables)

    def tick(self) -> list[str]:
        """Analyze what is due (at most every ``every_s``); returns the tables analyzed."""
        if not self.enabled:
            return []
        now = self._clock()
        if now < self._next:
            return []
        self._next = now + self.every_s
        names = [t for t in self.tables if t not in self._done]  # each analyzed here once
        with self.engine.connect() as conn:
            due = list(
                conn.execute(_WITHOUT, {"names": names, "min_bytes": self.min_bytes})
                .scalars()
                .all()
            )
        analyzed = []
        for name in due:
            try:
                with self.engine.begin() as conn:
                    conn.exec_driver_sql("SET LOCAL lock_timeout = '200ms'")
                    conn.exec_driver_sql(f'ANALYZE "{name}"')
            except Exception as exc:  # noqa: BLE001 - a lock not granted: asked again next look
                log.info("planner statistics: ANALYZE %s not done now (%s)", name, exc)
                continue
            analyzed.append(name)
            self._done.add(name)
        if analyzed:
            log.info("planner statistics: first ANALYZE of %s", ", ".join(analyzed))
            self.enabled = len(self._done) < len(self.tables)  # every table done: no more looks
        return analyzed
