"""Alembic migrations for the SQL store (``versions/`` holds one revision per schema change).

:data:`TABLE_MODULES` names every module that registers a table on
:data:`pipeline.store.metadata`; autogenerate and the "head equals the code" test import them
all, so a table added without a revision is caught.
"""

from __future__ import annotations

import importlib

TABLE_MODULES = (
    "pipeline.outbox.tables",
    "pipeline.runs.tables",
    "pipeline.runtime.dedupe",
    "pipeline.failures.quarantine_tables",
    "pipeline.failures.reporter",
    "pipeline.host.held",
    "pipeline.host.conversations",
    "pipeline.host.roster_cache",
    "pipeline.host.incarnation",
    "pipeline.host.tracking",
    "pipeline.host.inject_journal",
    "pipeline.control.requests",
    "pipeline.control.spawns",
    "pipeline.control.stops",
    "pipeline.effects.tables",
    "pipeline.effects.saga_tables",
    "pipeline.pool.tables",
)


def load_all_tables() -> None:
    """Import every table module so :data:`pipeline.store.metadata` holds the whole schema."""
    for name in TABLE_MODULES:
        importlib.import_module(name)
