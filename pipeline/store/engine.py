"""Engine factory for SQLite (WAL, the embedded default) and PostgreSQL (by URL).

Every table in the package registers on :data:`metadata`; the schema itself is built by the Alembic
revisions (:mod:`pipeline.store.schema`): a fresh store is created at head, any other store must
already be at head (``fleet store upgrade``). SQLite
gets WAL, ``synchronous=NORMAL`` (durable across process crashes, which is what kill -9 tests),
a busy timeout, and foreign keys on.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from .version import at_head

READONLY_OPTION = "fleet_readonly"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def make_engine(url: str, *, create: bool = True, **kwargs: Any) -> Engine:
    """Build an engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    ``create`` runs the start-up schema check: a fresh store is brought to head, a store behind
    head raises ``STORE_SCHEMA_OUTDATED`` (see :func:`pipeline.store.schema.ensure_schema`). A
    store already at head is recognised with one query, without Alembic (:mod:`.version`).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {"timeout": 30, "check_same_thread": False})
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy own transactions: pysqlite's implicit BEGIN defers the write lock
            # and breaks SAVEPOINT; we begin explicitly (below) instead.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # IMMEDIATE takes the write lock up front: two processes (gateway and relay) never
            # deadlock upgrading a read lock, they wait on busy_timeout instead. Read-only
            # sessions (see read_sessions) begin DEFERRED and never wait for writers (WAL).
            readonly = conn.get_execution_options().get(READONLY_OPTION, False)
            conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    else:
        kwargs.setdefault("pool_pre_ping", True)
        engine = create_engine(url, **kwargs)
    if create:
        try:
            if not at_head(readonly(engine)):
                # Alembic loads only here: a store that is fresh, behind or ahead of this code
                from .schema import ensure_schema

                ensure_schema(engine)
        except BaseException:
            engine.dispose()  # a refused store must not leave pooled connections behind
            raise
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def readonly(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions begin DEFERRED on SQLite: for pure reads.

    Under WAL a reader never waits for a writer; a read that took the write lock (IMMEDIATE)
    would queue every writer behind it, and SQLite's busy handler sleeps in coarse steps.
    """
    return engine.execution_options(**{READONLY_OPTION: True})


def read_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions for reads only: on SQLite they take no write lock (BEGIN DEFERRED under WAL)."""
    return sessionmaker(readonly(engine), expire_on_commit=False)
