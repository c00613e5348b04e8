"""Alembic environment: migrations always run on a connection handed in by pipeline.store.schema.

``pipeline.store.schema.upgrade`` opens the transaction (and takes the schema lock) and passes
its connection as ``config.attributes["connection"]``; SQLite gets batch mode so a future
revision may alter a column (SQLite has no ALTER COLUMN).
"""

from __future__ import annotations

from alembic import context

from pipeline.store import metadata
from pipeline.store.migrations import load_all_tables

if context.config.attributes.get("autogenerate"):
    # only a developer's `fleet store revision` needs every table module (and so every layer)
    load_all_tables()
connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable by calling alembic by hand
    raise RuntimeError("run migrations with `fleet store upgrade`, not the alembic CLI")
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
