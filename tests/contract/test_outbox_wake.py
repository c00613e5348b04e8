"""The in-process wake (pipeline/outbox/wake.py): a commit that wrote outbox rows wakes the relay
once its COMMIT returned; a commit that wrote none, or a rollback, does not (invariant 9 of
docs/outbox.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, func, select

from pipeline import outbox
from pipeline.outbox.wake import wake_on_commit
from pipeline.store import make_engine, session_factory


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


def test_only_a_commit_that_wrote_outbox_rows_wakes_and_the_row_is_there(engine: Engine) -> None:
    sessions = session_factory(engine)
    seen: list[int] = []  # outbox rows another connection reads when the wake comes

    def wake() -> None:
        with engine.connect() as c:
            seen.append(
                int(c.execute(select(func.count()).select_from(outbox.outbox)).scalar_one())
            )

    wake_on_commit(sessions, wake)
    with sessions.begin() as s:  # no outbox row: a held REPLY, a presence write
        s.execute(select(1))
    assert seen == []
    with pytest.raises(RuntimeError), sessions.begin() as s:
        outbox.write(s, topic="t", key=b"k", value=b"v", branch_key="b-rolled-back")
        raise RuntimeError("roll back")
    assert seen == []
    s2 = sessions()
    with s2.begin():
        outbox.write(s2, topic="t", key=b"k", value=b"v", branch_key="b")
    assert seen == [1]  # woken once, after the commit: the row is visible to the relay
    with s2.begin():  # the same session, a transaction that wrote nothing: no wake
        s2.execute(select(1))
    assert seen == [1]
    with pytest.raises(RuntimeError), s2.begin():  # a rolled-back write leaves no mark behind
        outbox.write(s2, topic="t", key=b"k", value=b"v", branch_key="b")
        raise RuntimeError("roll back")
    with s2.begin():
        s2.execute(select(1))
    assert seen == [1]
    s2.close()


def test_a_commit_hands_the_relay_its_rows_as_stored_and_a_rollback_none(engine: Engine) -> None:
    """The feed (pipeline/outbox/feed.py): the rows a commit hands over are the stored rows, id
    included; a rolled-back transaction hands nothing over, and a row written inside a
    savepoint makes the hand-off unusable (the relay reads instead). The id comes with the
    insert (SQLite) or its RETURNING (PostgreSQL) (R-OUT-3: the relay ships exactly what was
    committed)."""
    from pipeline.outbox.feed import Feed
    from pipeline.outbox.fetch import COLUMNS
    from pipeline.outbox.wake import feed_from, stop_feeding

    feed = Feed()
    sessions = session_factory(engine)
    woken: list[bool] = []
    wake_on_commit(sessions, lambda: woken.append(feed.woken_by_put()))
    feed_from(engine, feed)
    try:
        with pytest.raises(RuntimeError), sessions.begin() as s:
            outbox.write(s, topic="t", key=b"k", value=b"v0", branch_key="b")
            raise RuntimeError("roll back")
        with sessions.begin() as s:
            outbox.write(s, topic="t", key=b"k", value=b"v1", headers=[("h", b"1")], branch_key="b")
            outbox.write(s, topic="t", key=b"k", value=b"v2", branch_key="b")
        got = feed.take()
        with engine.connect() as c:
            stored = [
                tuple(r) for r in c.exec_driver_sql(f"SELECT {', '.join(COLUMNS)} FROM outbox")
            ]
        assert got == stored and [r[3] for r in stored] == [1, 2]
        assert woken == [True]  # the wake after the hand-off asks for no read
        with sessions.begin() as s:
            outbox.write(s, topic="t", key=b"k", value=b"v3", branch_key="b")
            with pytest.raises(RuntimeError), s.begin_nested():
                outbox.write(s, topic="t", key=b"k", value=b"v4", branch_key="b")
                raise RuntimeError("the savepoint rolls back alone")
        assert feed.take() is None  # lsn 4 was handed out, then rolled back: read instead
        with engine.connect() as conn:  # a session joined to an outer transaction "commits"
            outer = conn.begin()
            joined = sessions(bind=conn)
            outbox.write(joined, topic="t", key=b"k", value=b"v5", branch_key="b")
            joined.commit()  # its after_commit runs, the outer transaction is still open
            assert not feed.take()  # nothing usable handed over: that row may yet roll back
            joined.close()
            outer.rollback()
    finally:
        stop_feeding(engine, feed)
