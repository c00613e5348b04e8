"""The store's schema version: Alembic revisions, upgrade, and the check every process runs.

Invariants (docs/store.md):

* the schema is whatever the revisions in ``migrations/versions`` build -- never ``create_all``;
* a fresh, empty store is brought to head on first use (zero set-up steps);
* a store behind head (or made by v0.1.0, which had no version table) is never changed
  implicitly: a process refuses to start with ``STORE_SCHEMA_OUTDATED`` naming
  ``fleet store upgrade``; a store ahead of this code refuses with ``STORE_SCHEMA_AHEAD``;
* upgrade runs in one transaction under a lock (SQLite's write lock, a PostgreSQL advisory
  lock), so two processes starting on one fresh store create it once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from pipeline.errors import StoreError
from pipeline.reasons import Store

from .version import SCRIPT_LOCATION

# The tables v0.1.0 created (its create_all): any of them without a version table is a v0.1.0
# store, which must be upgraded on purpose rather than silently taken over.
_V010_TABLES = frozenset(
    {
        "outbox",
        "outbox_branch",
        "run",
        "run_branch",
        "run_step",
        "fleet_dedupe",
        "fleet_quarantine",
        "fleet_parked",
        "fleet_release_request",
        "fleet_failed_reported",
        "fleet_held",
        "fleet_waiters",
        "fleet_turns",
        "fleet_roster_cache",
        "fleet_forward_sends",
    }
)
_PG_LOCK_ID = 0x464C4545  # "FLEE": one advisory lock id for schema changes


class SchemaError(StoreError):
    """The store's schema is not the one this code expects; never retriable."""

    reason = Store.STORE_SCHEMA_OUTDATED
    retriable = False


@dataclass(frozen=True, kw_only=True)
class SchemaState:
    """Where a store stands: its revision (``None``: unversioned), head, and whether it is empty."""

    current: str | None
    head: str
    empty: bool

    @property
    def at_head(self) -> bool:
        return self.current == self.head


def _config(connection: Connection | None = None, *, autogenerate: bool = False) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    if connection is not None:
        cfg.attributes["connection"] = connection
    cfg.attributes["autogenerate"] = autogenerate
    return cfg


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


@functools.cache
def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return head


def _state(conn: Connection) -> SchemaState:
    tables = set(inspect(conn).get_table_names())
    current = MigrationContext.configure(conn).get_current_revision()
    return SchemaState(
        current=current, head=head_revision(), empty=current is None and not tables & _V010_TABLES
    )


def schema_state(engine: Engine) -> SchemaState:
    with engine.connect() as conn:
        return _state(conn)


def _lock(conn: Connection) -> None:
    # SQLite: our engine begins IMMEDIATE, so the transaction already holds the write lock.
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_ID})


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrade to ``revision``; return ``(before, after)``. A v0.1.0 store is taken from the
    baseline, whose tables are created only where missing (v0.1.0 created only the tables a
    process had imported)."""
    with engine.begin() as conn:
        _lock(conn)
        before = MigrationContext.configure(conn).get_current_revision()
        _run_upgrade(conn, revision)
        after = MigrationContext.configure(conn).get_current_revision()
    return before, after


def _run_upgrade(conn: Connection, revision: str) -> None:
    from alembic import command

    command.upgrade(_config(conn), revision)


def ensure_schema(engine: Engine) -> None:
    """The start-up check: create a fresh store at head, refuse anything else not at head."""
    state = schema_state(engine)
    if state.at_head:
        return
    if state.empty:
        with engine.begin() as conn:
            _lock(conn)
            state = _state(conn)  # another process may have created it meanwhile
            if state.empty:
                _run_upgrade(conn, "head")
                return
        if state.at_head:
            return
    known = {s.revision for s in _scripts().walk_revisions()}
    if state.current is not None and state.current not in known:
        raise SchemaError(
            f"the store's schema revision {state.current} is newer than this fleet-pipeline "
            f"(head {state.head}): upgrade fleet-pipeline",
            reason=Store.STORE_SCHEMA_AHEAD,
            context={"current": state.current, "head": state.head},
        )
    url = engine.url.render_as_string(hide_password=True)
    raise SchemaError(
        f"the store's schema is at {state.current or 'v0.1.0 (unversioned)'}, this code needs "
        f"{state.head}: run `fleet store upgrade --store-url {url}` (or --config fleet.toml)",
        context={"current": state.current, "head": state.head},
    )


def new_revision(engine: Engine, message: str, *, rev_id: str | None = None) -> str:
    """Write a revision file that brings a store at head to the tables the code declares now.

    For developers (``fleet store revision``): ``engine`` should be a scratch store at head.
    Read and edit the generated file before committing it (autogenerate misses renames).
    """
    from alembic import command

    with engine.begin() as conn:
        script = command.revision(
            _config(conn, autogenerate=True), message=message, autogenerate=True, rev_id=rev_id
        )
    assert script is not None and not isinstance(script, list)
    return str(script.path)
