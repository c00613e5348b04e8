"""The dedupe claim on SQLite and PostgreSQL: insert-or-ignore in the batch
transaction, ``RETURNING`` the ids that were new; released claims; the runtime on top of it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.exc import SQLAlchemyError

from pipeline.runtime import ConsumerRuntime, Record, RuntimeConfig, Staged
from pipeline.runtime.dedupe import claim_ids, release_ids, seen_ids
from pipeline.runtime.driver_sql import execute_many
from pipeline.runtime.outcomes import ACK, DeadLetter, Outcome
from pipeline.store import make_engine, session_factory
from pipeline.testing import FakeConsumer

pytestmark = pytest.mark.postgres

_md = MetaData()
_effects = Table(
    "dedupe_contract_effects",
    _md,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("value", String(50)),
)


@pytest.fixture
def engine(store_url: str) -> Any:
    engine = make_engine(store_url)
    _md.create_all(engine)
    yield engine
    engine.dispose()


def test_a_claim_returns_only_new_ids_per_scope_and_a_release_frees_them(engine: Any) -> None:
    with engine.begin() as conn:
        assert claim_ids(conn, "g", ["a", "b", "a"], 1) == {"a", "b"}
    with engine.begin() as conn:
        many = [f"x{i}" for i in range(1200)]  # more than one insert-many chunk
        assert claim_ids(conn, "g", ["a", "c", *many], 2) == {"c", *many}
        assert claim_ids(conn, "other", ["a"], 2) == {"a"}
        release_ids(conn, "g", ["c", *many])
    with engine.connect() as conn:
        rows = conn.execute(select(1)).all()  # the connection works after the claims
        assert rows == [(1,)]
    with session_factory(engine)() as s:
        assert seen_ids(s, "g", ["a", "b", "c", "x5"]) == {"a", "b"}
        assert seen_ids(s, "other", ["a"]) == {"a"}


def test_a_driver_error_on_the_batch_path_is_a_sqlalchemy_error(engine: Any) -> None:
    """R-ACK-2: the claim and the staged rows run on the DB-API cursor; a failed statement is
    still a ``SQLAlchemyError`` (the runtime's batch backoff catches exactly that), and the
    transaction rolls back."""
    with pytest.raises(SQLAlchemyError), engine.begin() as conn:
        claim_ids(conn, "g", ["a"], 1)
        execute_many(conn, "INSERT INTO no_such_table (x) VALUES (1)", [()])
    with engine.begin() as conn:
        assert claim_ids(conn, "g", ["a"], 1) == {"a"}  # the failed batch left no claim


def test_a_rolled_back_claim_leaves_no_row(engine: Any) -> None:
    conn = engine.connect()
    tx = conn.begin()
    assert claim_ids(conn, "g", ["r1"], 1) == {"r1"}
    tx.rollback()
    conn.close()
    with engine.begin() as conn:
        assert claim_ids(conn, "g", ["r1"], 2) == {"r1"}


class _Script:
    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.calls: list[str] = []

    def handle(self, record: Record, tx: Staged) -> Outcome:
        value = (record.value or b"").decode()
        self.calls.append(value)
        if value in self.bad:
            return DeadLetter(reason="SCHEMA_INVALID", error="bad")
        tx.insert(_effects, {"value": value})
        return ACK


class _Letters:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def stage(self, tx: Staged, failure: Any) -> None:
        tx.call(lambda _s: self.reasons.append(failure.reason))


def test_the_runtime_applies_once_across_a_redelivery_on_both_dialects(engine: Any) -> None:
    """R-FAIL-1 on each store: a redelivered batch (its async commit was lost) is
    dropped as duplicates; a dead-lettered record holds no claim, so a replay applies it."""
    fake = FakeConsumer()
    for value, msg_id in [("v0", "m0"), ("v1", "m1"), ("bad", "m2"), ("v1", "m1")]:
        fake.produce("t", 0, b"k", value.encode(), [("msgId", msg_id.encode())])
    sessions = session_factory(engine)

    def runtime(handler: _Script) -> ConsumerRuntime:
        return ConsumerRuntime(
            RuntimeConfig(bootstrap="fake:0", group_id="g", topics=("t",)),
            handler=handler,
            sessions=sessions,
            dead_letters=_Letters(),
            consumer_factory=lambda _conf: fake,
        )

    first = _Script(bad={"bad"})
    # each runtime holds one pooled connection across its batches: closed here, as run() does,
    # or PostgreSQL's connection outlives the test (a ResourceWarning in a later one)
    one = runtime(first)
    try:
        one.step()
    finally:
        one.batch_sessions.close()
    assert first.calls == ["v0", "v1", "bad"], "the second m1 is a duplicate within the batch"
    fake.position[("t", 0)] = 0  # the async commit was lost: everything comes again
    again = _Script(bad=set())
    two = runtime(again)
    try:
        two.step()
    finally:
        two.batch_sessions.close()
    assert again.calls == ["bad"], "only the dead-lettered record is applied on the replay"
    with sessions() as s:
        assert [r.value for r in s.execute(select(_effects).order_by(_effects.c.id))] == [
            "v0",
            "v1",
            "bad",
        ]
