"""``write_branch`` (a burst's receipts on one bare connection, a socket group's sends in one
session) writes what a ``write`` per record writes, on SQLite and on PostgreSQL (one statement): the same rows in the same order with consecutive lsns, the branch's watermark row for a
new branch, an inactive branch listed again, an abandoned one refused, and the rows noted for the
relay's feed (R-OUT-1: the intent is written in the caller's transaction; R-OUT-3: lsn order)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from pipeline.errors import DeliveryError
from pipeline.outbox import outbox, outbox_branch, outbox_sent
from pipeline.outbox.wake import collect, collected
from pipeline.outbox.writer import abandon_branch, write, write_branch
from pipeline.store import make_engine, session_factory

RECORDS = [
    (b"main-a", b"one", [("kind", b"INJECTED"), ("msgId", b"m1")]),
    (b"main-a", b"two", []),
    (None, None, [("kind", b"INJECTED"), ("sig", bytes(64))]),
]


def _rows(engine: Engine, branch: str) -> list[Any]:
    with engine.connect() as c:
        got = c.execute(
            select(outbox.c.lsn, outbox.c.topic, outbox.c.key, outbox.c.value, outbox.c.headers,
                   outbox.c.status).where(outbox.c.branch_key == branch).order_by(outbox.c.id)
        )  # fmt: skip
        return [tuple(r) for r in got]


def _branch(engine: Engine, branch: str) -> tuple[Any, ...]:
    with engine.connect() as c:
        b = c.execute(
            select(
                outbox_branch.c.last_lsn, outbox_branch.c.abandoned, outbox_branch.c.active
            ).where(outbox_branch.c.branch_key == branch)
        ).one()
        sent = c.execute(
            select(outbox_sent.c.sent_lsn).where(outbox_sent.c.branch_key == branch)
        ).all()
        return (*b, len(sent))


@pytest.fixture
def engine(store_url: str) -> Any:
    e = make_engine(store_url)
    yield e
    e.dispose()


def _write_each(engine: Engine, branch: str, records: list[Any]) -> list[int]:
    with engine.begin() as conn:
        return [write(conn, topic="t", key=k, value=v, headers=h, branch_key=branch)
                for k, v, h in records]  # fmt: skip


def _write_together(engine: Engine, branch: str, records: list[Any]) -> tuple[list[int], Any]:
    with engine.begin() as conn:
        collect(conn)
        lsns = write_branch(conn, records, topic="t", branch_key=branch)
        noted, _ = collected(conn)
    return lsns, noted


def test_a_branch_written_together_holds_what_a_write_each_holds(engine: Engine) -> None:
    assert _write_each(engine, "each", RECORDS) == [1, 2, 3]
    assert _write_together(engine, "together", RECORDS)[0] == [1, 2, 3]  # a new branch
    assert _rows(engine, "together") == _rows(engine, "each")
    assert _branch(engine, "together") == _branch(engine, "each") == (3, False, True, 1)
    assert _write_each(engine, "each", RECORDS[:2]) == [4, 5]  # an existing branch
    assert _write_together(engine, "together", RECORDS[:2])[0] == [4, 5]
    assert _rows(engine, "together") == _rows(engine, "each")
    assert _branch(engine, "together") == _branch(engine, "each") == (5, False, True, 1)


def test_an_inactive_branch_is_listed_again(engine: Engine) -> None:
    _write_together(engine, "b", RECORDS)
    with engine.begin() as conn:  # the relay found it all sent
        conn.execute(update(outbox_branch).values(active=False))
    assert _write_together(engine, "b", RECORDS)[0] == [4, 5, 6]
    assert _branch(engine, "b") == (6, False, True, 1)


def test_an_abandoned_branch_is_refused_and_nothing_is_written(engine: Engine) -> None:
    _write_together(engine, "b", RECORDS)
    with session_factory(engine).begin() as s:
        abandon_branch(s, branch_key="b")
    before = _rows(engine, "b")
    with pytest.raises(DeliveryError):
        _write_together(engine, "b", RECORDS)
    assert _rows(engine, "b") == before


def test_the_rows_are_noted_for_the_relay_as_it_reads_them(engine: Engine) -> None:
    from pipeline.outbox.feed import Feed
    from pipeline.outbox.wake import feed_from, stop_feeding

    feed = Feed()
    feed_from(engine, feed)
    try:
        lsns, noted = _write_together(engine, "b", RECORDS)
    finally:
        stop_feeding(engine, feed)
    with engine.connect() as c:
        ids = [r.id for r in c.execute(select(outbox.c.id).order_by(outbox.c.id))]
    assert [n[0] for n in noted] == ids
    assert [n[1:7] for n in noted] == [
        ("default", "b", lsn, "t", k, v) for lsn, (k, v, _) in zip(lsns, RECORDS, strict=True)
    ]


def test_a_session_s_rows_wake_the_relay_fed_in_order_at_its_commit(engine: Engine) -> None:
    """The socket's group commit: a session's branch written together is marked for the wake
    and handed to the relay's feed at the commit, as a write each marks it."""
    from pipeline.outbox.feed import Feed
    from pipeline.outbox.wake import feed_from, stop_feeding, wake_on_commit

    sessions = session_factory(engine)
    woken: list[int] = []
    wake_on_commit(sessions, lambda: woken.append(1))
    feed = Feed()
    feed_from(engine, feed)
    try:
        with sessions.begin() as s:
            assert write_branch(s, RECORDS, topic="t", branch_key="s") == [1, 2, 3]
            assert not woken  # not before the commit
        taken = feed.take()
    finally:
        stop_feeding(engine, feed)
    assert woken == [1]
    assert taken is not None and [row[3] for row in taken] == [1, 2, 3]
    assert _rows(engine, "s") == [(i + 1, "t", k, v, _packed(h), 0)
                                  for i, (k, v, h) in enumerate(RECORDS)]  # fmt: skip


def _packed(headers: Any) -> bytes | None:
    from pipeline.record_headers import pack_headers

    return pack_headers(headers) or None


@pytest.mark.parametrize("count", [0, 1, 3])
def test_the_writes_before_the_rows_commit_with_them_or_not_at_all(
    engine: Engine, count: int
) -> None:
    """``before`` (the socket group's tracking rows): run in the rows' transaction whatever path
    the rows take (none, one ``write``, the statement of many), each parameter row once; a
    refused branch takes them with it (nothing of the transaction commits)."""
    from pipeline.outbox.tables import outbox_branch as scratch  # any table: rows of our own

    mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
    sql = (f"INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, active) "
           f"VALUES ({mark}, {mark}, 0, {'0' if mark == '?' else 'false'}, "
           f"{'1' if mark == '?' else 'true'})")  # fmt: skip
    before = [(sql, [("scratch", "x1"), ("scratch", "x2")])]

    def scratch_rows() -> list[str]:
        with engine.connect() as c:
            got = c.execute(select(scratch.c.branch_key).where(scratch.c.tenant == "scratch"))
            return sorted(r.branch_key for r in got)

    with engine.begin() as conn:
        write_branch(conn, RECORDS[:count], topic="t", branch_key="b", before=before)
    assert scratch_rows() == ["x1", "x2"]
    assert len(_rows(engine, "b")) == count
    with session_factory(engine).begin() as s:
        abandon_branch(s, branch_key="c")
    again = [(sql, [("scratch", "y1")])]
    if count:
        with pytest.raises(DeliveryError), engine.begin() as conn:
            write_branch(conn, RECORDS[:count], topic="t", branch_key="c", before=again)
        assert scratch_rows() == ["x1", "x2"], "rolled back with the refused rows"
