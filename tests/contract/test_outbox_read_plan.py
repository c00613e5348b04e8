"""The relay's hot read is a range of the primary key in id order, on a store no ANALYZE has seen.

R-OUT-4: the relay ships a branch's rows in order and reads them in id order from the lowest
unsent one (``pipeline.outbox.fetch``). On PostgreSQL that read is an index scan only when the
planner knows the ids: a new store's ``outbox`` has no statistics until autovacuum's first
ANALYZE, and then the read was a scan of the whole table and a sort, at every pass. The reader's
connection pins the index plan (``READ_PLAN``) and gives it back to the pool without it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from pipeline.outbox import outbox, write
from pipeline.outbox.fetch import FetchSql, OutboxReader
from pipeline.store import make_engine, session_factory

ROWS = 2_000


def _plan(raw: Any, statement: str, params: tuple[object, ...], *, sqlite: bool) -> str:
    cur = raw.cursor()
    cur.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, params)
    text = "\n".join(" ".join(str(c) for c in row) for row in cur.fetchall())
    cur.close()
    return text


def test_the_relays_read_is_an_index_range_in_id_order_before_any_statistics(
    store_url: str,
) -> None:
    engine = make_engine(store_url)
    sqlite = engine.dialect.name == "sqlite"
    try:
        if not sqlite:  # no ANALYZE behind the test's back: the table stays without statistics
            with engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        with session_factory(engine).begin() as s:
            for _ in range(ROWS):
                write(s, topic="t", key=b"k", value=b"v" * 200, branch_key="a", tenant="acme")
        with engine.connect() as conn:
            top = int(conn.execute(select(func.max(outbox.c.id))).scalar_one())
        sql = FetchSql(engine.dialect.paramstyle, tenant=None, limit=1000)
        statement, params = sql.rows(top - 2)

        plain = engine.raw_connection()  # a connection as the pool hands it out
        if not sqlite:
            plain.dbapi_connection.autocommit = True
            pid = plain.dbapi_connection.info.backend_pid
            control = _plan(plain, statement, params, sqlite=False)
            # what the settings are for: this planner, on this table, scans it all and sorts
            assert "Seq Scan" in control, control
        plain.close()

        reader = OutboxReader(engine, sql)
        got = reader.read(first=True, stopped=set())
        assert [r[3] for r in got] == list(range(1, 1001))  # lsns in order, one batch
        plan = _plan(reader._conn.get(), statement, params, sqlite=sqlite)
        if sqlite:
            assert "INTEGER PRIMARY KEY" in plan and "TEMP B-TREE" not in plan, plan
        else:
            assert "Index Scan using pk_outbox" in plan, plan
            assert "Seq Scan" not in plan and "Sort" not in plan, plan
            # the reader's connection is the pool's one connection, taken again
            assert reader._conn.get().dbapi_connection.info.backend_pid == pid
        reader.close()

        if not sqlite:  # back in the pool without the reader's settings
            again = engine.raw_connection()
            assert again.dbapi_connection.info.backend_pid == pid
            cur = again.cursor()
            cur.execute("SHOW enable_seqscan")
            assert cur.fetchone()[0] == "on"
            cur.execute("SHOW enable_bitmapscan")
            assert cur.fetchone()[0] == "on"
            cur.close()
            again.close()
    finally:
        engine.dispose()
