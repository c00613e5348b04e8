"""``fleet store stats``: rows per table, the oldest row's age, the database's size.

Read-only (BEGIN DEFERRED on SQLite): safe against a running gateway. The size is what the
database occupies -- SQLite: ``page_count * page_size`` with the free pages a purge left for reuse
(the file does not shrink; new rows fill the free pages first); PostgreSQL:
``pg_database_size``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Engine, func, inspect, select, text

from pipeline.store import metadata, readonly
from pipeline.store.migrations import load_all_tables

from .rules import PurgeRule


@dataclass(frozen=True, kw_only=True)
class TableStats:
    table: str
    rows: int
    oldest_age_s: float | None  # None: empty, or the table has no time column we know


@dataclass(frozen=True, kw_only=True)
class StoreStats:
    dialect: str
    db_bytes: int
    free_bytes: int | None  # SQLite: free pages awaiting reuse; PostgreSQL: not reported
    tables: tuple[TableStats, ...]

    @property
    def used_bytes(self) -> int:
        return self.db_bytes - (self.free_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"used_bytes": self.used_bytes}


def store_stats(
    engine: Engine, rules: Iterable[PurgeRule], *, now: float | None = None
) -> StoreStats:
    """Rows per table, with the oldest row's age read from its rule's ``age`` column."""
    now_ms = (time.time() if now is None else now) * 1000
    load_all_tables()  # every declared table, not only those this process imported
    reader = readonly(engine)
    present = set(inspect(reader).get_table_names())
    ages = {r.table.name: r for r in rules}
    tables: list[TableStats] = []
    with reader.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name not in present:
                continue
            rows = int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            oldest_age: float | None = None
            rule = ages.get(table.name)
            if rule is not None and rule.age is not None and rows:
                oldest = conn.execute(select(func.min(rule.age))).scalar()
                if oldest is not None:
                    oldest_age = max(0.0, (now_ms - float(oldest) * rule.age_scale) / 1000.0)
            tables.append(TableStats(table=table.name, rows=rows, oldest_age_s=oldest_age))
        if engine.dialect.name == "sqlite":
            page = int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())
            count = int(conn.exec_driver_sql("PRAGMA page_count").scalar_one())
            free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
            db_bytes, free_bytes = page * count, page * free
        else:
            db_bytes = int(
                conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
            free_bytes = None
    return StoreStats(
        dialect=engine.dialect.name,
        db_bytes=db_bytes,
        free_bytes=free_bytes,
        tables=tuple(sorted(tables, key=lambda t: t.table)),
    )
