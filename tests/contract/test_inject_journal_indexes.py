"""The inject journal's readers find their rows through its two partial indexes (revision
``0018_journal_partial_indexes``), on SQLite and on real PostgreSQL.

A brief's open and close write an entry into one partial index each (the open rows by age, the
closed rows by their close) where full indexes on ``state`` and ``closed_ms`` wrote four. What
that must not cost: a reader that scans the journal, which holds every brief closed within the
retention horizon. The statements checked are the ones the code runs (captured as they are sent):
a restart's report of the open rows (``open_entries``), the gauge of briefs being injected
(``StoreReader.entity_counts``) and retention's purge (``Purger.count``, the same condition as
its deletes). SQLite uses a partial index only when the query's terms imply its condition, so
the open rows' readers write the state as a literal (``inject_journal.IS_OPEN``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert

from pipeline.bootstrap.retention import rules_for
from pipeline.host import inject_journal as journal
from pipeline.observability.store_reader import StoreReader
from pipeline.retention.policy import RetentionConfig
from pipeline.retention.purger import Purger
from pipeline.retention.rules import StoreTable
from pipeline.store import make_engine, session_factory

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    e = make_engine(store_url)
    rows = [
        {"msg_id": f"m{n:04d}", "gid": "worker-b", "sender": "main-a", "reply_host": "A",
         "trace_id": "t", "opened_ms": n, "closed_ms": None if n % 100 == 0 else n + 1,
         "state": journal.OPEN if n % 100 == 0 else journal.INJECTED}
        for n in range(2000)
    ]  # fmt: skip
    with e.begin() as conn:
        conn.execute(insert(journal.journal_table), rows)
    yield e
    e.dispose()


def _sent(engine: Engine, run: Any) -> list[tuple[str, Any]]:
    """The journal's SELECTs ``run()`` sends through ``engine``, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_a: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and journal.journal_table.name in (
            statement
        ):
            sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert sent, "the reader sent no statement on the journal"
    return sent


def _plan(engine: Engine, statement: str, parameters: Any) -> str:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        # a table this small is read whole when the planner may: ask whether the index serves
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("EXPLAIN " + statement, parameters)
        return "\n".join(str(row[0]) for row in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()


def _uses(engine: Engine, run: Any, index: str) -> None:
    for statement, parameters in _sent(engine, run):
        plan = _plan(engine, statement, parameters)
        assert re.search(rf"\b{index}\b", plan), f"{statement}\n{plan}"


def test_a_restart_s_report_reads_the_open_rows_by_the_open_index(engine: Engine) -> None:
    def report() -> None:
        with session_factory(engine)() as s:
            assert [r.msg_id for r in journal.open_entries(s)] == [
                f"m{n:04d}" for n in range(0, 2000, 100)
            ]

    _uses(engine, report, "ix_fleet_inject_journal_open")


def test_the_injecting_gauge_counts_the_open_rows_by_the_open_index(engine: Engine) -> None:
    reader = StoreReader(engine)
    counted: dict[str, Any] = {}

    def gauge() -> None:
        counted.update(reader.entity_counts())

    _uses(engine, gauge, "ix_fleet_inject_journal_open")
    assert counted["worker-b"].injecting == 20


def test_retention_finds_the_closed_rows_by_the_closed_index(engine: Engine) -> None:
    policy = RetentionConfig(tracking_finished_s=1.0)
    [rule] = rules_for(StoreTable.INJECT_JOURNAL)
    purger = Purger(engine=engine, policy=policy, rules=[rule], clock=lambda: 1_000.0)
    found: list[int] = []
    # closed before 1,000 s - 1 s: every closed row (closes at 2 .. 2,000 ms)
    _uses(
        engine,
        lambda: found.append(purger.count(rule, 1_000_000)),
        "ix_fleet_inject_journal_closed",
    )
    assert found == [1980]
