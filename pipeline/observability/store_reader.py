"""One store's read side for the exporter and ``fleet top``: the same reads serve both.

:class:`StoreReader` holds one database's read-only engine and answers the fleet gauges (held
messages, quarantined keys, outbox backlog) and, for ``fleet top``, the same figures per entity
and the host's roster view. The exporter sums :meth:`StoreReader.held_messages` over its stores
(:mod:`.store_gauges`); ``fleet top`` reads :meth:`StoreReader.host_view` once a second. A
table the store does not have reads as 0 (a gateway's SQLite with no pool tables, an
application database with only the outbox); its absence is re-checked until it appears.

Every read is read-only: on SQLite it begins DEFERRED under WAL, so it never takes the write
lock a gateway or relay waits on, and nothing here creates a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Select, func, inspect, select

from pipeline.failures.quarantine import QuarantineStore
from pipeline.failures.quarantine_tables import quarantine_table
from pipeline.host import roster_cache
from pipeline.host.deadlines import PENDING
from pipeline.host.held import HeldStore, held_table
from pipeline.host.inject_journal import IS_OPEN, journal_table
from pipeline.host.tracking import forward_table
from pipeline.outbox.status import backlog
from pipeline.outbox.tables import outbox
from pipeline.store import read_sessions
from pipeline.store.engine import READONLY_OPTION

# a gateway rewrites its roster state row at least every 2 s: older means it is not running
GATEWAY_SILENT_MS = 10_000


@dataclass(frozen=True, kw_only=True)
class EntityCounts:
    """Per entity, in one store: held (undrained), in flight (sent, no INJECTED yet), and
    being injected (inject journal rows still open)."""

    held: int = 0
    in_flight: int = 0
    injecting: int = 0


@dataclass(frozen=True, kw_only=True)
class HostStoreView:
    """What one host's store says, as of one read."""

    stale: bool
    why: str
    roster: tuple[roster_cache.RosterEntry, ...]
    counts: dict[str, EntityCounts] = field(default_factory=dict)
    quarantined_keys: int = 0
    outbox_backlog: int = 0
    outbox_oldest_created_at: float | None = None


class StoreReader:
    """One database: its read-only engine and which of the read tables it has."""

    def __init__(self, engine: Engine) -> None:
        self.owned = engine
        self.engine = engine.execution_options(**{READONLY_OPTION: True})
        self.held = HeldStore(read_sessions(engine))
        self.quarantine = QuarantineStore(self.engine)
        self._present: set[str] = set()

    def has(self, table: str) -> bool:
        if table not in self._present and inspect(self.engine).has_table(table):
            self._present.add(table)
        return table in self._present

    def held_messages(self) -> int:
        if not self.has(held_table.name):
            return 0
        with self.held.sessions() as session:
            return self.held.pending_count(session)

    def quarantined_keys(self) -> int:
        return self.quarantine.quarantined_keys() if self.has(quarantine_table.name) else 0

    def outbox(self) -> tuple[int, float | None]:
        return backlog(self.engine) if self.has(outbox.name) else (0, None)

    def entity_counts(self) -> dict[str, EntityCounts]:
        """Held, in-flight and injecting per gid: three grouped counts, one per table."""
        held: dict[str, int] = {}
        flying: dict[str, int] = {}
        injecting: dict[str, int] = {}
        with self.engine.connect() as conn:
            if self.has(held_table.name):
                held = _grouped(
                    conn,
                    select(held_table.c.recipient, func.count())
                    .where(held_table.c.drained_at_ms.is_(None))
                    .group_by(held_table.c.recipient),
                )
            if self.has(forward_table.name):
                flying = _grouped(
                    conn,
                    select(forward_table.c.sender, func.count())
                    .where(forward_table.c.state == PENDING)
                    .group_by(forward_table.c.sender),
                )
            if self.has(journal_table.name):
                injecting = _grouped(
                    conn,
                    select(journal_table.c.gid, func.count())
                    .where(IS_OPEN)  # the open rows' partial index
                    .group_by(journal_table.c.gid),
                )
        return {
            gid: EntityCounts(
                held=held.get(gid, 0), in_flight=flying.get(gid, 0), injecting=injecting.get(gid, 0)
            )
            for gid in set(held) | set(flying) | set(injecting)
        }

    def host_view(self, now_ms: int) -> HostStoreView:
        """The host's roster view (STALE as its gateway judges it), per-entity counts and the
        host's quarantine and outbox figures."""
        stale, why = True, "no roster view in this store"
        entries: tuple[roster_cache.RosterEntry, ...] = ()
        if self.has(roster_cache.roster_state_table.name):
            with self.held.sessions() as session:
                state = roster_cache.read_state(session)
                every = roster_cache.all_entries(session)
            silent = state.written_ms < now_ms - GATEWAY_SILENT_MS
            stale = state.stale or silent
            why = state.why or ("the gateway has not refreshed its view" if silent else "")
            entries = tuple(e for e in every if state.is_live(e, now_ms))
        count, oldest = self.outbox()
        return HostStoreView(
            stale=stale,
            why=why,
            roster=entries,
            counts=self.entity_counts(),
            quarantined_keys=self.quarantined_keys(),
            outbox_backlog=count,
            outbox_oldest_created_at=oldest,
        )

    def close(self) -> None:
        self.owned.dispose()


def _grouped(conn: Connection, stmt: Select[Any]) -> dict[str, int]:
    rows = conn.execute(stmt)
    return {str(key): int(n) for key, n in rows}
