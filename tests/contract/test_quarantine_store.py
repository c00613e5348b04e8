"""Quarantine store contract, run on SQLite (WAL) and real PostgreSQL (R-QUAR, R-FAIL-3:
per-key quarantine when order matters; state survives a restart and a partition move)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.errors import FleetError
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.record import Record
from pipeline.store import make_engine

SCOPE = Scope("fleet.gw.h1", "fleet.inbox.h1")


@pytest.fixture
def engines(store_url: str) -> Iterator[Callable[[], Engine]]:
    """Engines on the parametrised store; each one is disposed at teardown."""
    made: list[Engine] = []

    def make() -> Engine:
        made.append(make_engine(store_url))
        return made[-1]

    yield make
    for engine in made:
        engine.dispose()


def rec(offset: int, key: bytes = b"K", partition: int = 3) -> Record:
    return Record(
        topic=SCOPE.topic,
        partition=partition,
        offset=offset,
        timestamp_ms=1000 + offset,
        key=key,
        headers=(("msgId", f"m{offset}".encode()), ("bin", b"\x00\xff")),
        value=f"v{offset}".encode(),
    )


def quarantine_k(store: QuarantineStore, engine, offsets: list[int]) -> None:
    with Session(engine) as s, s.begin():
        store.quarantine(
            s,
            SCOPE,
            "K",
            reason="RETRIES_EXHAUSTED",
            dead_letter_ref="d:0:1",
            record=rec(offsets[0]),
        )
    for off in offsets[1:]:
        with Session(engine) as s, s.begin():
            store.park(s, SCOPE, "K", rec(off))


def test_quarantine_and_parked_order_survive_a_restart(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    assert not store.is_quarantined(SCOPE, "K")
    quarantine_k(store, engine, [10, 12, 15, 19])
    assert store.is_quarantined(SCOPE, "K") and not store.is_quarantined(SCOPE, "other")

    # a new process (or the member that took over the partition) sees the same state
    again = QuarantineStore(engines())
    assert again.is_quarantined(SCOPE, "K")
    assert not again.is_quarantined(Scope("other.group", SCOPE.topic), "K")
    taken = again.take_for_release(SCOPE, "K")
    assert [(p.seq, p.dead_letter, p.record.offset) for p in taken] == [
        (0, True, 10),
        (1, False, 12),
        (2, False, 15),
        (3, False, 19),
    ]
    assert taken[1].record == rec(12)  # key, headers (binary, order) and body kept verbatim
    [entry] = again.list()
    assert (entry.key, entry.partition, entry.parked, entry.dead_letter_ref) == ("K", 3, 3, "d:0:1")
    assert again.counts() == (1, 3)


def test_park_and_quarantine_are_idempotent_on_redelivery(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    quarantine_k(store, engine, [10, 12])
    with Session(engine) as s, s.begin():  # a crash before the offset commit redelivers both
        store.quarantine(s, SCOPE, "K", reason="X", dead_letter_ref="d:0:9", record=rec(10))
        assert store.park(s, SCOPE, "K", rec(12)) == 1
        assert store.park(s, SCOPE, "K", rec(13)) == 2
    assert [p.record.offset for p in store.take_for_release(SCOPE, "K")] == [10, 12, 13]
    assert store.list()[0].reason == "RETRIES_EXHAUSTED"


def test_cache_follows_commit_not_rollback(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    with Session(engine) as s:
        s.begin()
        store.quarantine(s, SCOPE, "K", reason="X", dead_letter_ref="d:0:1", record=rec(1))
        s.rollback()
    assert not store.is_quarantined(SCOPE, "K")
    assert store.refresh(SCOPE) == set()
    other = QuarantineStore(engine)
    assert not other.is_quarantined(SCOPE, "K")  # loaded now: empty scope is cached
    quarantine_k(store, engine, [1])
    assert store.is_quarantined(SCOPE, "K")
    assert not other.is_quarantined(SCOPE, "K")  # stale until the new owner refreshes ...
    other.refresh(SCOPE)  # ... which the runtime does on partition assignment
    assert other.is_quarantined(SCOPE, "K")


def test_release_request_is_executed_by_the_owner_then_lifts_the_quarantine(
    engines: Callable[[], Engine],
) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    with pytest.raises(FleetError) as info:
        store.request_release(SCOPE, "K")
    assert info.value.reason == "NOT_QUARANTINED"
    quarantine_k(store, engine, [10, 11])
    rid = store.request_release(SCOPE, "K")
    assert store.request_release(SCOPE, "K") == rid  # idempotent while pending
    [pending] = store.pending_releases(SCOPE)
    assert (pending.id, pending.key, pending.partition, pending.state) == (rid, "K", 3, "PENDING")
    assert store.pending_releases(Scope("g2", SCOPE.topic)) == []
    # owner: replay in order, then complete in its own transaction
    replayed = [p.record.offset for p in store.take_for_release(SCOPE, "K")]
    assert replayed == [10, 11]
    with Session(engine) as s, s.begin():
        store.complete_release(s, SCOPE, "K")
    assert not store.is_quarantined(SCOPE, "K")
    assert store.release_status(rid).state == "DONE" and store.pending_releases(SCOPE) == []
    assert store.take_for_release(SCOPE, "K") == [] and store.counts() == (0, 0)
    # a later failure of the same key starts a fresh sequence
    quarantine_k(store, engine, [30, 31])
    assert [p.seq for p in store.take_for_release(SCOPE, "K")] == [0, 1]


def test_failed_release_keeps_the_rest_quarantined_in_order(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    quarantine_k(store, engine, [10, 11, 12, 13])
    rid = store.request_release(SCOPE, "K")
    # the owner replayed seq 0 and 1, then seq 2 failed again
    with Session(engine) as s, s.begin():
        store.fail_release(
            s,
            SCOPE,
            "K",
            failed_seq=2,
            reason="RETRIES_EXHAUSTED",
            error="still down",
            dead_letter_ref="d:0:77",
        )
    status = store.release_status(rid)
    assert status.state == "FAILED" and "still down" in status.note
    assert store.is_quarantined(SCOPE, "K")
    left = store.take_for_release(SCOPE, "K")
    assert [(p.record.offset, p.dead_letter) for p in left] == [(12, True), (13, False)]
    assert store.list()[0].dead_letter_ref == "d:0:77"
    with pytest.raises(FleetError):
        store.release_status(9999)


def test_a_release_that_fails_again_marks_the_request_failed_not_pending(
    engines: Callable[[], Engine],
) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    quarantine_k(store, engine, [10, 11])
    rid = store.request_release(SCOPE, "K")
    # the owner replays seq 0, it fails again and is dead-lettered again (runtime path)
    with Session(engine) as s, s.begin():
        store.quarantine(
            s, SCOPE, "K", reason="RETRIES_EXHAUSTED", dead_letter_ref="d:0:50", record=rec(10)
        )
    status = store.release_status(rid)
    assert status.state == "FAILED" and "d:0:50" in status.note
    assert store.pending_releases(SCOPE) == []  # not retried in a loop
    assert store.is_quarantined(SCOPE, "K")
    assert [p.record.offset for p in store.take_for_release(SCOPE, "K")] == [10, 11]


def test_an_all_topics_scope_keeps_each_records_own_topic(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    wide = Scope("fleet.gw.h1", "*")
    a = Record(topic="t.a", partition=0, offset=5, timestamp_ms=1, key=b"K", headers=(), value=b"a")
    b = Record(topic="t.b", partition=0, offset=5, timestamp_ms=1, key=b"K", headers=(), value=b"b")
    with Session(engine) as s, s.begin():
        store.quarantine(s, wide, "K", reason="X", dead_letter_ref="d:0:1", record=a)
        assert store.park(s, wide, "K", b) == 1  # same partition/offset, other topic: kept
        assert store.park(s, wide, "K", b) == 1
    taken = store.take_for_release(wide, "K")
    assert [(p.record.topic, p.record.value) for p in taken] == [("t.a", b"a"), ("t.b", b"b")]
    [req] = [store.release_status(store.request_release(wide, "K"))]
    assert (req.src_topic, req.partition) == ("t.a", 0)


def test_cache_ignores_a_rolled_back_savepoint_but_keeps_the_outer_commit(
    engines: Callable[[], Engine],
) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    with Session(engine) as s, s.begin():
        store.quarantine(s, SCOPE, "A", reason="X", dead_letter_ref="d:0:1", record=rec(1))
        nested = s.begin_nested()
        store.quarantine(
            s, SCOPE, "B", reason="X", dead_letter_ref="d:0:2", record=rec(2, key=b"B")
        )
        nested.rollback()
    assert store.is_quarantined(SCOPE, "A") and not store.is_quarantined(SCOPE, "B")
    assert QuarantineStore(engine).refresh(SCOPE) == {"A"}  # the cache matches the store


def test_cache_waits_for_the_outer_commit_not_a_released_savepoint(
    engines: Callable[[], Engine],
) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    with Session(engine) as s:
        s.begin()
        with s.begin_nested():  # savepoint released ...
            store.quarantine(s, SCOPE, "B", reason="X", dead_letter_ref="d:0:2", record=rec(2))
        s.rollback()  # ... but the transaction rolls back
    assert not store.is_quarantined(SCOPE, "B")
    assert store.refresh(SCOPE) == set()


def test_gauge_counts_for_the_exporter(engines: Callable[[], Engine]) -> None:
    engine = engines()
    store = QuarantineStore(engine)
    assert (store.quarantined_keys(), store.parked_records()) == (0, 0)
    quarantine_k(store, engine, [1, 2, 3])
    assert (store.quarantined_keys(), store.parked_records()) == (1, 2)


def test_max_age_bounds_how_stale_another_members_view_can_be(
    engines: Callable[[], Engine],
) -> None:
    engine = engines()
    writer, reader = QuarantineStore(engine), QuarantineStore(engine, max_age_s=0.0)
    assert not reader.is_quarantined(SCOPE, "K")
    quarantine_k(writer, engine, [1])
    assert reader.is_quarantined(SCOPE, "K")  # reloaded: the cached copy was too old
