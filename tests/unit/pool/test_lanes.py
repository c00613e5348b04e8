"""The dispatcher's lanes and commit watermark (pure logic, no broker)."""

from __future__ import annotations

from pipeline.record import Record
from pipeline.runtime.lanes import Concurrency, Lanes

T = "fleet.pool.t"


def rec(offset: int, key: str = "a", partition: int = 0) -> Record:
    return Record(
        topic=T,
        partition=partition,
        offset=offset,
        key=key.encode(),
        value=b"",
        headers=(),
        timestamp_ms=0,
    )


def test_partition_mode_runs_one_record_per_partition_in_order() -> None:
    lanes = Lanes(Concurrency.PARTITION, depth=10)
    r0, r1, q0 = rec(0, "a"), rec(1, "b"), rec(0, "a", partition=1)
    for r in (r0, r1, q0):
        lanes.add(r)
    assert lanes.startable(10) == [r0, q0]  # one per partition, several partitions at once
    assert lanes.startable(10) == []  # partition 0 is busy, whatever r1's key
    assert lanes.watermark((T, 0)) == 0
    assert lanes.finish(r0)
    assert lanes.watermark((T, 0)) == 1
    assert lanes.startable(10) == [r1]
    assert lanes.finish(r1)
    assert lanes.watermark((T, 0)) == 2


def test_key_mode_runs_keys_in_parallel_and_the_watermark_waits_for_the_lowest() -> None:
    lanes = Lanes(Concurrency.KEY, depth=10)
    a0, b1, a2 = rec(0, "a"), rec(1, "b"), rec(2, "a")
    for r in (a0, b1, a2):
        lanes.add(r)
    assert lanes.startable(10) == [a0, b1]  # a2 waits behind a0 (same key)
    assert lanes.finish(b1)
    assert lanes.watermark((T, 0)) == 0  # never past a0, still running
    assert lanes.finish(a0)
    assert lanes.watermark((T, 0)) == 2  # a2 queued
    assert lanes.startable(10) == [a2]
    assert lanes.finish(a2)
    assert lanes.watermark((T, 0)) == 3


def test_startable_respects_the_thread_limit() -> None:
    lanes = Lanes(Concurrency.KEY, depth=10)
    for i in range(5):
        lanes.add(rec(i, f"k{i}"))
    assert len(lanes.startable(2)) == 2
    assert len(lanes.running()) == 2


def test_full_partition_is_reported_at_its_depth() -> None:
    lanes = Lanes(Concurrency.PARTITION, depth=2)
    lanes.add(rec(0))
    assert not lanes.full((T, 0))
    lanes.add(rec(1))
    assert lanes.full((T, 0))
    assert lanes.total_held() == 2


def test_rewind_seeks_below_dropped_records_of_other_keys_and_discards_late_copies() -> None:
    lanes = Lanes(Concurrency.KEY, depth=10)
    a0, a1, b2, b3 = rec(0, "a"), rec(1, "a"), rec(2, "b"), rec(3, "b")
    for r in (a0, a1, b2, b3):
        lanes.add(r)
    lanes.startable(10)  # a0, b2 running; a1, b3 queued
    # b2 failed and must be retried: a1 (queued, lower offset) is dropped, so resume at 1;
    # the dropped records are handed back: a1 (queued) and b2, b3 (running / queued)
    assert lanes.rewind((T, 0), 2) == (1, [a1, b2, b3])
    assert lanes.watermark((T, 0)) == 0  # a0 still running
    assert lanes.finish(a0)
    assert lanes.watermark((T, 0)) == 1  # the floor: nothing from 1 on until re-fetched
    assert not lanes.finish(b2)  # a late step at/after the seek is discarded
    a1_again = rec(1, "a")
    lanes.add(a1_again)
    assert lanes.watermark((T, 0)) == 1
    assert lanes.startable(10) == [a1_again]
    assert lanes.finish(a1_again)
    assert lanes.watermark((T, 0)) == 2


def test_a_running_copy_rewound_past_does_not_finish_its_refetched_twin() -> None:
    lanes = Lanes(Concurrency.PARTITION, depth=10)
    old = rec(5)
    lanes.add(old)
    lanes.startable(10)
    lanes.rewind((T, 0), 5)
    twin = rec(5)
    lanes.add(twin)
    assert lanes.startable(10) == []  # the lane is still busy with the old copy
    assert not lanes.finish(old)
    assert lanes.watermark((T, 0)) == 5
    assert lanes.startable(10) == [twin]
    assert lanes.finish(twin)
    assert lanes.watermark((T, 0)) == 6


def test_forget_queued_keeps_the_watermark_below_what_was_dropped() -> None:
    lanes = Lanes(Concurrency.KEY, depth=10)
    a0, b1, a2 = rec(0, "a"), rec(1, "b"), rec(2, "a")
    for r in (a0, b1, a2):
        lanes.add(r)
    lanes.startable(10)  # a0, b1 running; a2 queued
    assert lanes.finish(b1)
    assert lanes.finish(a0)
    lanes.forget_queued({(T, 0)})  # revoke: a2 dropped, never committed past
    assert lanes.watermark((T, 0)) == 2


def test_forget_returns_the_steps_given_up() -> None:
    lanes = Lanes(Concurrency.PARTITION, depth=10)
    r0 = rec(0)
    lanes.add(r0)
    lanes.add(rec(1))
    lanes.startable(10)
    assert lanes.forget({(T, 0)}) == [r0]
    assert lanes.watermark((T, 0)) is None
    assert not lanes.finish(r0)  # its late end is ignored
    assert lanes.total_held() == 0
