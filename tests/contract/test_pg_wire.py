"""Statements sent on libpq's pipeline directly mean what a psycopg cursor's mean (R-ACK-2, R-ACK-8).

``pipeline.store.pg_wire`` carries a batch's ``BEGIN`` + claim and its rows + ``COMMIT``: the
values adapted as a cursor adapts them, a failed statement raised as psycopg raises it with
the rest of the pipeline skipped, nothing left for psycopg's ``DEALLOCATE ALL`` to break, and
a connection broken mid-way closed, never used again in an unknown state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pipeline.store import pg_wire


@pytest.fixture
def conn(store_url: str) -> Iterator[Any]:
    if not store_url.startswith("postgresql"):
        pytest.skip("libpq's pipeline is PostgreSQL's")
    c = psycopg.connect(store_url.replace("postgresql+psycopg://", "postgresql://"))
    c.execute(
        "CREATE TABLE w (k text PRIMARY KEY, n bigint, small int, b bytea, t text, f boolean)"
    )
    c.commit()
    yield c
    c.close()


def _prepared(conn: Any) -> int:
    """Statements this module prepared on ``conn``'s server session."""
    row = conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE '\\_fleet\\_%'"
    ).fetchone()
    conn.rollback()  # psycopg's DEALLOCATE ALL follows: count first
    return int(row[0])


_INSERT = "INSERT INTO w (k, n, small, b, t, f) VALUES (%s, %s, %s, %s, %s, %s) RETURNING k"


def test_a_pipeline_returns_and_stores_what_a_cursor_would(conn: Any) -> None:
    """R-ACK-8: BEGIN and the claim in one pipeline, the rows and COMMIT in the next: the
    values stored and returned are the ones a cursor stores and returns."""
    rows = [("a", 2**40, 7, b"\x00\xff", "t\u00e9", True), ("b", None, -1, b"", "", False)]
    assert pg_wire.run(conn, [("BEGIN", [()]), (_INSERT, [rows[0]])], rows_of=1) == ["a"]
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    pg_wire.run(conn, [(_INSERT, [rows[1]]), ("COMMIT", [()])])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    got = conn.execute("SELECT k, n, small, b, t, f FROM w ORDER BY k").fetchall()
    conn.rollback()
    assert got == rows


def test_a_failed_statement_raises_psycopgs_error_and_the_rest_is_skipped(conn: Any) -> None:
    """R-ACK-2: a write that fails in the COMMIT's pipeline commits nothing of the
    transaction; the error is psycopg's own class, and the connection rolls back and goes on."""
    pg_wire.run(conn, [(_INSERT, [("a", 1, 1, b"", "", True)]), ("COMMIT", [()])])
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg_wire.run(
            conn,
            [
                ("BEGIN", [()]),
                (_INSERT, [("c", 1, 1, b"", "", True), ("a", 1, 1, b"", "", True)]),
                (_INSERT, [("d", 1, 1, b"", "", True)]),
                ("COMMIT", [()]),
            ],
        )
    conn.rollback()
    assert conn.execute("SELECT k FROM w ORDER BY k").fetchall() == [("a",)]
    conn.rollback()
    assert pg_wire.run(conn, [("BEGIN", [()]), (_INSERT, [("e", 1, 1, b"", "", True)])], rows_of=1)
    conn.rollback()


def test_a_rollback_through_psycopg_between_pipelines_breaks_nothing(conn: Any) -> None:
    """psycopg deallocates every prepared statement after a rollback (``DEALLOCATE ALL``):
    a pipeline that follows one runs as the one before it (none of its statements is a
    prepared one)."""
    other = "INSERT INTO w (k, n) VALUES (%s, %s)"
    for k in ("p", "q", "r", "s", "t", "u"):  # psycopg prepares a statement from its 5th use
        conn.execute("SELECT count(*) FROM w WHERE k = %s", (k,))
        pg_wire.run(conn, [(other, [(k, 1)]), ("COMMIT", [()])])
        conn.execute("SAVEPOINT x")
        conn.execute("ROLLBACK TO SAVEPOINT x")
        conn.rollback()
    assert [r[0] for r in conn.execute("SELECT k FROM w ORDER BY k")] == list("pqrstu")
    conn.rollback()


def test_a_statement_is_prepared_once_and_a_skipped_prepare_is_made_again(conn: Any) -> None:
    """The server parses a batch's statement once per connection, as with psycopg's own
    prepared statements; a Parse the server skipped (an earlier statement failed) is not
    taken as prepared."""
    other = "INSERT INTO w (k, n) VALUES (%s, %s)"
    with pytest.raises(psycopg.errors.SyntaxError):
        pg_wire.run(conn, [("BEGIN", [()]), ("NOT SQL", [()]), (other, [("x", 1)])])
    conn.rollback()
    for k in ("y", "z"):
        pg_wire.run(conn, [("BEGIN", [()]), (other, [(k, 1), (k + "2", 2)]), ("COMMIT", [()])])
    assert _prepared(conn) == 1
    assert conn.execute("SELECT k FROM w ORDER BY k").fetchall() == [
        ("y",),
        ("y2",),
        ("z",),
        ("z2",),
    ]
    conn.rollback()


def test_a_connection_told_never_to_prepare_gets_no_prepared_statement(store_url: str) -> None:
    """``prepare_threshold=None`` (a connection behind a transaction pooler, say) is honoured:
    the statements go unnamed, and they still write."""
    if not store_url.startswith("postgresql"):
        pytest.skip("libpq's pipeline is PostgreSQL's")
    url = store_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, prepare_threshold=None) as c:
        c.execute("CREATE TABLE v (k text PRIMARY KEY)")
        c.commit()
        sql = "INSERT INTO v (k) VALUES (%s)"
        for k in ("a", "b", "c"):
            pg_wire.run(c, [("BEGIN", [()]), (sql, [(k,)]), ("COMMIT", [()])])
        assert _prepared(c) == 0
        assert c.execute("SELECT count(*) FROM v").fetchone() == (3,)
        c.rollback()


def test_a_connection_broken_mid_way_is_closed(conn: Any, store_url: str) -> None:
    """A connection whose pipeline failed in the middle is in no known state: it is closed,
    and the error is psycopg's ``OperationalError`` (SQLAlchemy takes it as a disconnect)."""
    pid = conn.info.backend_pid
    with psycopg.connect(
        store_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        pg_wire.run(conn, [("BEGIN", [()]), (_INSERT, [("a", 1, 1, b"", "", True)])], rows_of=1)
    assert conn.closed


def test_named_parameters_are_sent_as_psycopg_sends_them(conn: Any) -> None:
    """The relay's ack names its parameters: a name used twice is one parameter."""
    sql = "INSERT INTO w (k, n, small) VALUES (%(k)s, %(n)s, %(n)s) RETURNING k"
    rows = [{"k": "a", "n": 3}, {"n": 4, "k": "b"}]
    assert pg_wire.run(conn, [("BEGIN", [()]), (sql, rows), ("COMMIT", [()])], rows_of=1) == ["b"]
    assert conn.execute("SELECT k, n, small FROM w ORDER BY k").fetchall() == [
        ("a", 3, 3),
        ("b", 4, 4),
    ]
    conn.rollback()


def test_lists_go_as_binary_arrays_and_mean_what_a_cursor_sends(conn: Any) -> None:
    """R-ACK-8: the outbox writes its rows as arrays (``unnest``) and the deadlines read their
    states by an array of ids (``ANY``): sent in the binary format, each list stores and
    matches what the same statement through a cursor does -- every byte value, NULL elements,
    big and small integers, and an empty or all-NULL list (whose element type cannot be told,
    sent as text)."""
    every_byte = bytes(range(256))
    keys, blobs = ["a", "b\u00e9", 'c,{}"\\'], [every_byte, None, b""]
    numbers: list[Any] = [2**40, -1, None]
    write = "INSERT INTO w (k, b, n) SELECT * FROM unnest(%s::text[], %s::bytea[], %s::bigint[])"
    read = "SELECT k FROM w WHERE k = ANY(%s) AND (n IS NULL OR n <> ALL(%s)) ORDER BY k"
    pg_wire.run(conn, [("BEGIN", [()]), (write, [(keys, blobs, numbers)]), ("COMMIT", [()])])
    got = conn.execute("SELECT k, b, n FROM w ORDER BY k").fetchall()
    conn.rollback()
    assert got == sorted(zip(keys, blobs, numbers, strict=True))
    for ids, not_n in ((keys, [7]), (["b\u00e9", "z"], [2**40]), ([], [1]), ([None], [None])):
        via_cursor = [r[0] for r in conn.execute(read, (ids, not_n)).fetchall()]
        conn.rollback()
        sent = pg_wire.run(conn, [(read, [(ids, not_n)])], rows_of=0)
        assert sent == via_cursor, (ids, not_n)
    assert pg_wire.run(conn, [(read, [(keys, [7])])], rows_of=0) == sorted(keys)


def test_placeholders_taken_and_left_to_psycopg() -> None:
    assert pg_wire.usable([("SELECT %s, '%%', %s", [(1, 2)])])
    assert pg_wire._query("SELECT %s, '%%', %s") == (b"SELECT $1, '%', $2", None)
    assert pg_wire._query("SELECT %(a)s, %(b)s, %(a)s") == (b"SELECT $1, $2, $1", ("a", "b"))
    assert pg_wire.usable([("SELECT %(a)s", [{"a": 1}])])
    assert not pg_wire.usable([("SELECT %(a)s", [(1,)])])  # a sequence for named ones
    assert not pg_wire.usable([("SELECT %(a)s, %s", [{"a": 1}])])  # both kinds
    assert not pg_wire.usable([("SELECT %b", [(b"",)])])
    assert not pg_wire.usable([("SELECT 1 %", [()])])
