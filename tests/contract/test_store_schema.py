"""Versioned store schema (Alembic), on SQLite and real PostgreSQL.

Invariants (docs/store.md): a fresh store is created at head by any process; a v0.1.0 store
(no version table, possibly only some tables) is refused with STORE_SCHEMA_OUTDATED until
``fleet store upgrade`` adopts it, keeping its rows; the revisions at head build exactly the
tables the code declares.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.errors import FleetError
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.outbox import outbox_status
from pipeline.reasons import Store
from pipeline.runtime.dedupe import seen_ids
from pipeline.store import make_engine, metadata, session_factory
from pipeline.store.migrations import load_all_tables
from pipeline.store.schema import head_revision, schema_state

from .v0_1_0_schema import POSTGRESQL, SQLITE

pytestmark = pytest.mark.postgres


def _v010(url: str, *, only: tuple[str, ...] | None = None) -> None:
    """Create the store exactly as v0.1.0 did (frozen DDL, no version table)."""
    engine = sa.create_engine(url)
    ddl = SQLITE if engine.dialect.name == "sqlite" else POSTGRESQL
    with engine.begin() as conn:
        for stmt in ddl:
            if only is None or any(f" {t} " in stmt.split("(")[0] + " " for t in only):
                conn.exec_driver_sql(stmt)
    engine.dispose()


def _write_v010_rows(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status,"
                " created_at) VALUES ('t', 'b1', 1, 'fleet.inbox.h', :k, :v, NULL, 0, 1.0),"
                " ('t', 'b1', 2, 'fleet.inbox.h', :k, :v, NULL, 1, 2.0)"
            ),
            {"k": b"key", "v": b"value"},
        )
        conn.execute(
            sa.text(
                "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned)"
                " VALUES ('t', 'b1', 2, false)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO fleet_dedupe (scope, msg_id, seen_at_ms) VALUES ('s', 'm-1', 5),"
                " ('s', 'm-2', 6)"
            )
        )
        # v0.1.0 parked headers as JSON of [name, base64(value)] (order and duplicates matter)
        for seq, headers in enumerate((V010_PARKED_HEADERS, "[]")):
            conn.execute(
                sa.text(
                    "INSERT INTO fleet_parked (grp, topic, key, seq, dead_letter, src_topic,"
                    ' partition, "offset", timestamp_ms, record_key, headers, value, parked_ms)'
                    " VALUES ('g', 't', 'k', :seq, :dl, 't', 0, :off, 7, :k, :h, :v, 8)"
                ),
                {"seq": seq, "dl": seq == 0, "off": 10 + seq, "k": b"k", "h": headers, "v": b"v"},
            )
    engine.dispose()


V010_PARKED_HEADERS = '[["sig", "AP8="], ["a", ""], ["a", "eA=="]]'


def _upgrade_cli(url: str) -> str:
    result = CliRunner().invoke(app, ["store", "upgrade", "--store-url", url])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_fresh_store_is_created_at_head(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        state = schema_state(engine)
        assert state.current == head_revision() and state.at_head
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), _all_tables())
        assert diffs == [], "a table or column without a revision (see docs/store.md)"
    finally:
        engine.dispose()


def _all_tables() -> sa.MetaData:
    load_all_tables()
    return metadata


def test_two_processes_starting_on_a_fresh_store_create_it_once(store_url: str) -> None:
    errors: list[BaseException] = []
    engines: list[sa.Engine] = []

    def start() -> None:
        try:
            engines.append(make_engine(store_url))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert schema_state(engines[0]).at_head
    for e in engines:
        e.dispose()


def test_a_v010_store_is_refused_then_upgraded_and_keeps_its_rows(store_url: str) -> None:
    _v010(store_url)
    _write_v010_rows(store_url)
    with pytest.raises(FleetError) as caught:
        make_engine(store_url)
    assert caught.value.reason == Store.STORE_SCHEMA_OUTDATED
    assert caught.value.retriable is False
    assert "fleet store upgrade --store-url" in str(caught.value)

    current = CliRunner().invoke(app, ["store", "current", "--store-url", store_url])
    assert current.exit_code == 1 and "unversioned" in current.output
    assert "-> " + head_revision() in _upgrade_cli(store_url)

    engine = make_engine(store_url)  # the start-up check now passes
    try:
        status = outbox_status(engine)
        # lsn 2 was SENT after the unsent lsn 1: revision 0012 makes "sent" the branch's prefix,
        # so it goes out again (a duplicate the fold drops, never a loss)
        assert status.backlog == 2
        assert [(b.branch_key, b.next_lsn, b.pending) for b in status.branches] == [("b1", 3, 2)]
        with session_factory(engine)() as session:
            assert seen_ids(session, "s", ["m-1", "m-2", "m-3"]) == {"m-1", "m-2"}
        # parked headers now in the one binary form, read by the one codec, order kept
        parked = QuarantineStore(engine).take_for_release(Scope(group="g", topic="t"), "k")
        assert [p.record.headers for p in parked] == [
            (("sig", b"\x00\xff"), ("a", b""), ("a", b"x")),
            (),
        ]
        assert [p.dead_letter for p in parked] == [True, False]
    finally:
        engine.dispose()


def test_a_partial_v010_store_gets_its_missing_tables(store_url: str) -> None:
    """v0.1.0's create_all made only the tables a process had imported (a relay: the outbox)."""
    _v010(store_url, only=("outbox", "outbox_branch", "ix_outbox_pending"))
    _write_v010_rows_outbox_only(store_url)
    with pytest.raises(FleetError):
        make_engine(store_url)
    _upgrade_cli(store_url)
    engine = make_engine(store_url)
    try:
        names = set(sa.inspect(engine).get_table_names())
        assert {"fleet_dedupe", "fleet_held", "outbox", "run_step"} <= names
        assert outbox_status(engine).backlog == 1
    finally:
        engine.dispose()


def _write_v010_rows_outbox_only(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (tenant, branch_key, lsn, topic, status, created_at)"
                " VALUES ('t', 'b', 1, 'x', 0, 1.0)"
            )
        )
    engine.dispose()


def test_a_store_newer_than_the_code_is_refused(store_url: str) -> None:
    make_engine(store_url).dispose()
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_future'"))
    engine.dispose()
    with pytest.raises(FleetError) as caught:
        make_engine(store_url)
    assert caught.value.reason == Store.STORE_SCHEMA_AHEAD
