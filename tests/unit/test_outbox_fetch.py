"""The relay's hot read (pipeline/outbox/fetch.py): branch quanta on the unique index."""

from __future__ import annotations

import sqlite3

import pytest

from pipeline.outbox.fetch import COLUMNS, FetchSql, PassCursor


def test_the_branch_list_is_written_as_the_partial_index_is() -> None:
    """Both databases use ``ix_outbox_branch_unsent`` only when the query states its condition;
    the row read is a range of the primary key from the id."""
    fetch = FetchSql("qmark", tenant=None, limit=500)
    sql, params = fetch.branches()
    assert "FROM outbox_branch b JOIN outbox_sent s " in sql  # the watermark's own row
    assert sql.endswith("WHERE b.active AND NOT b.abandoned")
    assert params == ()
    assert fetch.rows(7) == (
        f"SELECT {', '.join(COLUMNS)} FROM outbox WHERE status = 0 AND id >= ? "
        "ORDER BY id LIMIT 500",
        (7,),
    )


@pytest.mark.parametrize(("paramstyle", "p"), [("qmark", "?"), ("pyformat", "%s")])
def test_the_tenant_and_the_start_are_bound_parameters(paramstyle: str, p: str) -> None:
    fetch = FetchSql(paramstyle, tenant="x'); DROP TABLE outbox; --", limit=7)
    sql, params = fetch.branches()
    assert sql.endswith(f"AND b.tenant = {p}") and params == ("x'); DROP TABLE outbox; --",)
    sql, params = fetch.rows(41)
    assert f"id >= {p} AND tenant = {p} ORDER BY id LIMIT 7" in sql
    assert params == (41, "x'); DROP TABLE outbox; --")


def test_an_unknown_paramstyle_is_refused() -> None:
    with pytest.raises(ValueError, match="numeric"):
        FetchSql("numeric", tenant=None, limit=1)


def _db(
    branches: dict[str, int], status: dict[tuple[str, int], int] | None = None
) -> sqlite3.Connection:
    """An outbox with ``branches[b]`` rows per branch, written round-robin (ids interleave)."""
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY, tenant, branch_key, lsn, topic, key, value, "
        "headers, created_at, status)"
    )
    top = max(branches.values())
    for lsn in range(1, top + 1):
        for b, n in branches.items():
            if lsn <= n:
                db.execute(
                    "INSERT INTO outbox (tenant, branch_key, lsn, topic, created_at, status) "
                    "VALUES ('t', ?, ?, 'x', 0, ?)",
                    (b, lsn, (status or {}).get((b, lsn), 0)),
                )
    return db


def _drain(db: sqlite3.Connection, marks: dict[str, int], limit: int, stopped=()) -> list[list]:
    """One pass as the relay reads it; ``marks``: each branch's watermark."""
    first = "SELECT id FROM outbox WHERE branch_key = ? AND lsn = ?"
    listed = []
    for b, m in marks.items():
        found = db.execute(first, (b, m + 1)).fetchone()
        listed.append(("t", b, m, found[0] if found else None))
    cursor = PassCursor(FetchSql("qmark", tenant=None, limit=limit), listed, set(stopped))
    batches = []
    cur = db.cursor()
    while batch := cursor.next_batch(cur, set(stopped)):
        assert len(batch) <= limit
        batches.append([(r[2], r[3]) for r in batch])
    assert not cursor.marks  # a pass ends with every branch read to its end
    return batches


def test_a_pass_reads_every_unsent_row_once_in_lsn_order_per_branch() -> None:
    db = _db({"a": 10, "b": 3, "c": 7})
    batches = _drain(db, {"a": 2, "b": 0, "c": 7}, limit=4)  # c is fully sent
    rows = [r for batch in batches for r in batch]
    assert len(rows) == len(set(rows)) == 8 + 3
    for branch, first in (("a", 3), ("b", 1)):
        lsns = [lsn for b, lsn in rows if b == branch]
        assert lsns == list(range(first, first + len(lsns)))  # gapless, ascending
    assert all(len(batch) == 4 for batch in batches[:-1])
    assert len(COLUMNS) == 9


def test_a_stopped_branch_and_non_pending_rows_are_not_read() -> None:
    db = _db({"a": 5, "b": 5}, status={("b", 3): 3})  # b's lsn 3 FAILED
    rows = [
        r for batch in _drain(db, {"a": 0, "b": 0}, limit=100, stopped=[("t", "a")]) for r in batch
    ]
    assert [lsn for b, lsn in rows if b == "b"] == [1, 2]  # stops reading at the FAILED row
    assert not [r for r in rows if r[0] == "a"]
