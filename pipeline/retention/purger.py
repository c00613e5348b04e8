"""The purger: delete finished rows past their retention, in small batches, off the hot path.

It runs inside the gateway's maintenance loop (one pass every ``every_s``), on a thread of its
own in every other long-running process (:meth:`Purger.start`: the relay, a pool member, the
FAILED reporter, a saga process -- each on the tables it writes), and from ``fleet store
purge``. Each batch is one short transaction deleting at most ``batch_rows`` rows that
match their table's rule (:mod:`pipeline.retention.rules`); a table gets at most ``max_batches``
batches per pass, with a pause between them, so a SQLite writer (the inbox runtime, the relay)
never waits behind the purger for more than one batch. Before writing, a read-only look checks
there is anything to delete: an idle store never takes the write lock for a purge.

The rule is repeated inside the DELETE (``WHERE rule AND key IN (SELECT key WHERE rule LIMIT
n)``), so a row whose state changed after it was chosen is never deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from threading import Event

from sqlalchemy import Engine, delete, func, inspect, select, tuple_

from pipeline.store import readonly

from .metrics import RetentionMetrics
from .policy import RetentionConfig
from .rules import PurgeRule, StoreTable

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class PurgeReport:
    """Rows purged (or, in a dry run, purgeable) per table in one pass."""

    rows: dict[StoreTable, int] = field(default_factory=dict)
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class Purger:
    """Applies ``rules`` (every table's: :data:`pipeline.bootstrap.retention.RULES`) to one store
    (see module doc)."""

    def __init__(
        self,
        *,
        engine: Engine,
        policy: RetentionConfig,
        metrics: RetentionMetrics | None = None,
        clock: Callable[[], float] = time.time,
        rules: Iterable[PurgeRule],
        pause_s: float = 0.005,
    ) -> None:
        self.engine = engine
        self.reader = readonly(engine)
        self.policy = policy
        self.metrics = metrics
        self.clock = clock
        self.pause_s = pause_s
        self._all_rules = tuple(rules)
        self._rules: tuple[PurgeRule, ...] | None = None
        self._next = 0.0

    def start(self, stop: Event) -> threading.Thread:
        """Purge on a daemon thread of its own: a pass now, then one every ``every_s``, until
        ``stop`` (a pass in progress ends between two batches). Never the consumer's or the
        relay's thread: they wait at most one batch behind a purge on SQLite."""
        thread = threading.Thread(
            target=self.run_forever, args=(stop,), name="store-purge", daemon=True
        )
        thread.start()
        return thread

    def run_forever(self, stop: Event) -> None:
        """See :meth:`start`. A failed pass (the store is down) is logged and tried again at the
        next one."""
        while not stop.is_set():
            try:
                self.run(stop=stop)
            except Exception:
                log.exception("store purge failed; next pass in %g s", self.policy.every_s)
            if stop.wait(self.policy.every_s):
                return

    @property
    def rules(self) -> tuple[PurgeRule, ...]:
        """The rules whose table exists in this store (an older store may lack some)."""
        if self._rules is None:
            present = set(inspect(self.reader).get_table_names())
            self._rules = tuple(r for r in self._all_rules if r.table.name in present)
        return self._rules

    def due(self) -> bool:
        """True once ``every_s`` has passed since the last pass (the maintenance loop asks)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.policy.every_s
        return True

    def run(self, *, dry_run: bool = False, stop: Event | None = None) -> PurgeReport:
        """One pass over every table; then the per-table row gauges are refreshed. Once ``stop``
        is set, the pass ends between two batches."""
        now = int(self.clock() * 1000)
        report = PurgeReport(dry_run=dry_run)
        for rule in self.rules:
            if stop is not None and stop.is_set():
                break
            report.rows[rule.name] = (
                self.count(rule, now) if dry_run else self._purge(rule, now, stop)
            )
        if self.metrics is not None and not dry_run:
            for name, n in report.rows.items():
                self.metrics.purged.labels(name.value).inc(n)
            for name, n in self.row_counts().items():
                self.metrics.rows.labels(name.value).set(n)
        if report.total:
            log.info("store purge: %s", {k.value: v for k, v in report.rows.items() if v})
        return report

    def count(self, rule: PurgeRule, now: int) -> int:
        """How many rows of ``rule``'s table may be purged now (read-only)."""
        stmt = select(func.count()).select_from(rule.table).where(rule.condition(now, self.policy))
        with self.reader.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def row_counts(self) -> dict[StoreTable, int]:
        with self.reader.connect() as conn:
            return {
                r.name: int(conn.execute(select(func.count()).select_from(r.table)).scalar_one())
                for r in self.rules
            }

    def _purge(self, rule: PurgeRule, now: int, stop: Event | None) -> int:
        cond = rule.condition(now, self.policy)
        keys = rule.keys
        key = keys[0] if len(keys) == 1 else tuple_(*keys)
        chosen = select(*keys).where(cond).limit(self.policy.batch_rows)
        stmt = delete(rule.table).where(cond, key.in_(chosen))
        purged = 0
        for batch in range(self.policy.max_batches):
            if batch and (stop is not None and stop.wait(self.pause_s)):
                break
            if batch and stop is None:
                time.sleep(self.pause_s)
            with self.reader.connect() as conn:  # look first: no write lock when idle
                if conn.execute(chosen.limit(1)).first() is None:
                    break
            with self.engine.begin() as conn:
                n = int(getattr(conn.execute(stmt), "rowcount", 0) or 0)
            purged += n
            if n < self.policy.batch_rows:
                break
        return purged
