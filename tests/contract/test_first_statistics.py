"""The gateway's first ``ANALYZE`` of a table that grew without statistics (PostgreSQL).

A new store's tables have no planner statistics until autovacuum's first look. A statement
prepared while its table was small keeps the plan made then (a generic plan is made again only
when the table's statistics change): the sender's lookup of the tracking rows a batch of
receipts settles (``msg_id = ANY(...)``, a primary-key read) kept scanning the whole table as
it grew. Maintenance's duty
(:class:`pipeline.store.first_statistics.FirstStatistics`) analyzes each table once, when it
is past its size threshold without statistics, and never again; on SQLite it does nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, insert

from pipeline.host.deadlines import PENDING
from pipeline.host.tracking import forward_table
from pipeline.outbox import write
from pipeline.store import make_engine, metadata, session_factory
from pipeline.store.first_statistics import FirstStatistics

ROWS = 2_000
LOOKUP = "SELECT 0, msg_id, state, host FROM fleet_forward_sends WHERE msg_id = ANY($1)"


def _plan(raw: Any, ids: list[str]) -> str:
    """The plan the prepared lookup runs now (its cached generic plan)."""
    cur = raw.cursor()
    cur.execute(f"EXPLAIN EXECUTE lookup({_array(ids)})")
    plan = "\n".join(str(r[0]) for r in cur.fetchall())
    cur.close()
    return plan


def _array(ids: list[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{i}'" for i in ids) + "]"  # the test's own ids, no quotes


def _rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "msg_id": f"m-{i:06d}",
            "sender": "main-a",
            "recipient": "worker-b",
            "host": "B",
            "trace_id": f"t-{i}",
            "sent_ms": i,
            "deadline_ms": i + 1000,
            "state": PENDING,
        }
        for i in range(start, start + n)
    ]


def test_a_table_grown_without_statistics_is_analyzed_once_and_small_ones_are_left(
    store_url: str,
) -> None:
    engine = make_engine(store_url)
    now = [100.0]
    duty = FirstStatistics(
        engine, [t.name for t in metadata.sorted_tables], every_s=5.0, clock=lambda: now[0]
    )
    try:
        if engine.dialect.name != "postgresql":
            statements: list[str] = []
            event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
            assert not duty.enabled and duty.tick() == [] and statements == []
            return
        with engine.begin() as conn:  # autovacuum stays out of the test's way
            for table in ("fleet_forward_sends", "outbox"):
                conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            conn.execute(insert(forward_table), _rows(5))
        with session_factory(engine).begin() as s:  # a few rows: under the threshold
            for _ in range(3):
                write(s, topic="t", key=b"k", value=b"v", branch_key="a", tenant="acme")
        ids = ["m-001234", "m-000007"]
        raw = engine.raw_connection()  # a connection that prepared the lookup early on
        raw.dbapi_connection.autocommit = True
        cur = raw.cursor()
        cur.execute("SET plan_cache_mode = force_generic_plan")  # its plan made at once
        # PREPARE by the simple protocol (a $1 sent by the extended one is the outer statement's)
        raw.dbapi_connection.pgconn.exec_(f"PREPARE lookup(text[]) AS {LOOKUP}".encode())
        cur.execute(f"EXECUTE lookup({_array(ids)})")
        cur.close()
        with engine.begin() as conn:  # then the table grows
            conn.execute(insert(forward_table), _rows(ROWS, start=5))
        before = _plan(raw, ids)
        assert "Seq Scan on fleet_forward_sends" in before, before  # what the duty is for

        assert duty.tick() == ["fleet_forward_sends"]
        after = _plan(raw, ids)  # planned again: the table's statistics changed
        assert "pk_fleet_forward_sends" in after and "Seq Scan" not in after, after
        raw.close()

        seen: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        assert duty.tick() == [] and seen == []  # within every_s: not even a look
        now[0] += 5.0
        assert duty.tick() == []  # a look: the analyzed table has statistics, outbox is small
        assert len(seen) == 1 and "pg_stats" in seen[0]
        assert not any("ANALYZE" in s for s in seen)
    finally:
        engine.dispose()


def test_a_table_whose_owner_role_the_gateway_lacks_is_left_to_autovacuum(
    postgres_url: str,
) -> None:
    """ANALYZE by a role that does not own the table skips it with a warning in the server's
    log: the duty does not ask (it would at every look), and the owner's duty would."""
    import os

    import pytest
    import sqlalchemy as sa

    from pipeline.testing import unique_name

    if os.environ.get("FLEET_TEST_PG_URL"):
        pytest.skip("logs in as a new role: needs the suite's own server (trust authentication)")
    name = unique_name("fs").replace(".", "_")
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        conn.execute(sa.text(f'CREATE ROLE "{name}" LOGIN'))
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    owner = make_engine(url)
    other_url = sa.engine.make_url(url).set(username=name).render_as_string(hide_password=False)
    other = None
    try:
        with owner.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE fleet_forward_sends SET (autovacuum_enabled = false)")
            conn.execute(insert(forward_table), _rows(ROWS))
            conn.exec_driver_sql(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{name}"')
        other = make_engine(other_url)
        tables = [t.name for t in metadata.sorted_tables]
        assert FirstStatistics(other, tables).tick() == []
        assert FirstStatistics(owner, tables).tick() == ["fleet_forward_sends"]
    finally:
        if other is not None:
            other.dispose()
        owner.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'DROP ROLE "{name}"'))
        admin.dispose()
