"""The in-flight dispatcher's intake and wake-up (pure logic around a fake consumer, no broker).

R-POOL-2 (each partition is processed one event at a time), R-POOL-1 (partitions as
concurrency): a member
with a backlog on every partition keeps every lane busy. Two ways it did not: one fetch filled the
member with one partition's records (librdkafka hands out a backlog a partition at a time), and a
finished step waited for the next ``poll`` timeout before its lane got the next record.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from confluent_kafka import TopicPartition

from pipeline.record import Record
from pipeline.runtime.inflight import (
    MIN_WAKE_S,
    REFETCH_S,
    WAKE_FRACTION,
    Dispatcher,
    InflightConfig,
)
from pipeline.runtime.lanes import Concurrency
from pipeline.testing import FakeMessage

T = "fleet.pool.t"


def rec(offset: int, partition: int = 0, key: str = "k") -> Record:
    return Record(
        topic=T,
        partition=partition,
        offset=offset,
        key=key.encode(),
        value=b"",
        headers=(),
        timestamp_ms=0,
    )


class Consumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[int, int]] = []
        self.paused: set[int] = set()

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in tps}


class Gate:
    """A step runner whose steps end when the test says so."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def run(self, _record: Record) -> None:
        self.started.release()
        self.release.wait(5)


def dispatcher(runner: Any, *, depth: int = 2, max_records: int = 50) -> Dispatcher:
    cfg = InflightConfig(mode=Concurrency.PARTITION, max_records=max_records, depth=depth)
    return Dispatcher(cfg, runner)


def test_a_fetch_past_a_partitions_depth_is_kept_and_the_partition_paused_not_re_read() -> None:
    """Records past the buffer depth join their lane (no refusal, no seek back: a seek stalled
    the partition's next fetch at low rates); the full partition is paused at the next turn,
    and the watermark stays below every record not yet handled."""
    gate = Gate()
    d = dispatcher(gate)
    consumer = Consumer()
    assigned = {(T, 0), (T, 1)}
    d.room(consumer, assigned, lambda _tp: False)
    d.submit([*(rec(o) for o in range(10)), rec(0, partition=1)])
    assert d.lanes.held((T, 0)) == 10 and d.lanes.held((T, 1)) == 1
    assert len(d.lanes.running()) == 2
    room = d.room(consumer, assigned, lambda _tp: False)
    assert consumer.seeks == []
    assert consumer.paused == {0}  # full: paused until its lane drains below the depth
    assert room == 50 - 11
    assert d.committable({(T, 0): 10}, {}) == {(T, 0): 0}
    gate.release.set()
    d.close()


def test_a_duplicate_fetch_is_not_taken_for_a_record_past_the_depth() -> None:
    gate = Gate()
    d = dispatcher(gate)
    consumer = Consumer()
    d.submit([rec(0), rec(1)])
    d.submit([rec(1)])  # a seek raced a fetch: the same record again
    d.room(consumer, {(T, 0)}, lambda _tp: False)
    assert consumer.seeks == []
    gate.release.set()
    d.close()


def test_the_poll_keeps_its_timeout_while_no_step_runs() -> None:
    d = dispatcher(Gate())
    assert d.wait_s(0.05) == 0.05
    d.close()


def test_with_nothing_fetchable_the_loop_waits_for_a_step_to_end_instead_of_polling() -> None:
    gate = Gate()
    d = dispatcher(gate, depth=1)
    consumer = Consumer()
    d.submit([rec(0)])
    assert gate.started.acquire(timeout=5)
    d.room(consumer, {(T, 0)}, lambda _tp: False)  # partition 0 is full: nothing to fetch
    threading.Timer(0.05, gate.release.set).start()
    assert d.wait_s(5.0) == 0.0  # returned when the step ended, not after 5 s
    assert [r.offset for r in d.completed()] == [0]
    assert d.step_s is not None
    d.close()


def test_a_saturated_member_waits_for_a_finished_step_not_a_poll_slice() -> None:
    """Every lane busy (a step on each partition; in key mode every step slot): a record fetched
    now could only queue, so the loop sleeps on the done queue and wakes when a step ends --
    the backlog's next record starts at once instead of a poll slice later."""
    for mode, assigned, submitted in (
        (Concurrency.PARTITION, {(T, 0), (T, 1)}, [rec(0), rec(0, partition=1)]),
        (Concurrency.KEY, {(T, 0), (T, 1)}, [rec(0)]),
    ):
        gate = Gate()
        cfg = InflightConfig(mode=mode, max_in_flight=1 if mode is Concurrency.KEY else 64)
        d = Dispatcher(cfg, gate)
        consumer = Consumer()
        d.submit(submitted)
        for _ in submitted:
            assert gate.started.acquire(timeout=5)
        d.room(consumer, assigned, lambda _tp: False)
        assert consumer.paused == set()  # nothing is full: records still arrive in the buffer
        threading.Timer(0.05, gate.release.set).start()
        assert d.wait_s(5.0) == 0.0, mode  # returned when a step ended, not after 5 s
        assert d.completed()
        d.close()


def test_while_steps_run_and_records_may_arrive_the_poll_is_a_slice_of_a_step() -> None:
    gate = Gate()
    d = dispatcher(gate)
    consumer = Consumer()
    d.submit([rec(0)])
    d.room(consumer, {(T, 0), (T, 1)}, lambda _tp: False)  # partition 1 has room
    assert d.wait_s(0.05) < 0.05  # no step time known yet: a short slice
    d.step_s = 0.2
    assert d.wait_s(0.05) == 0.2 / WAKE_FRACTION
    d.step_s = 0.0001
    assert d.wait_s(0.05) == MIN_WAKE_S
    d.step_s = 2.0  # agent steps of seconds: the full timeout, no busy polling
    assert d.wait_s(0.05) == 0.05
    gate.release.set()
    d.close()


class Recorder:
    """A step runner that records what ran and ends at once."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.lock = threading.Lock()

    def run(self, record: Record) -> None:
        with self.lock:
            self.ran.append(record.offset)


def _drain(d: Dispatcher) -> list[Record]:
    out: list[Record] = []
    for _ in range(200):
        out += d.completed()
        if not d.lanes.running() and not any(d.lanes._queues.values()):
            return out
        threading.Event().wait(0.005)
    raise AssertionError("steps did not end")


def test_a_retried_record_waits_in_memory_and_rejoins_its_lane_in_order_without_a_re_read() -> None:
    """R-RETRY-4 (a poison record, retried with backoff): a retry in a worker pool
    keeps the partition's records in memory for the backoff -- nothing is sought back or
    fetched twice (a re-read waited out a fresh fetch, making every backoff half a second too
    long) -- and at release they rejoin their lane in offset order; nothing from the retried
    offset on is committable meanwhile."""
    runner = Recorder()
    d = dispatcher(runner, depth=10)
    d.submit([rec(0), rec(1), rec(2)])
    done = _drain(d)
    assert [r.offset for r in done] == [0, 1, 2]
    # the runtime applied 0, and retries 1: it hands back 1 and 2 (2 was skipped behind it)
    d.hold_back((T, 0), 1, done[1:])
    d.submit([rec(3)])  # fetched before the pause took effect: it waits behind them
    assert d.lanes.watermark((T, 0)) == 1
    assert d.committable({(T, 0): 3}, {}) == {(T, 0): 1}
    runner.ran.clear()
    d.release((T, 0))
    done = _drain(d)
    assert runner.ran == [1, 2, 3]
    assert [r.offset for r in done] == [1, 2, 3]
    assert d.lanes.watermark((T, 0)) == 4


def test_a_step_still_running_at_the_hold_back_is_discarded_and_its_copy_runs_again() -> None:
    gate = Gate()
    d = dispatcher(gate, depth=10)
    d.submit([rec(5)])
    assert gate.started.acquire(timeout=5)
    d.hold_back((T, 0), 5)  # the record is running: it is handed back from the lanes
    d.release((T, 0))
    assert len(d.lanes.running()) == 1  # the lane is still busy with the old run
    gate.release.set()
    done = _drain(d)
    assert [r.offset for r in done] == [5]  # the copy's completion only, not the old run's
    assert d.lanes.watermark((T, 0)) == 6


def test_a_revoke_drops_held_back_records() -> None:
    runner = Recorder()
    d = dispatcher(runner, depth=10)
    d.submit([rec(0)])
    done = _drain(d)
    d.hold_back((T, 0), 0, done)
    d.forget({(T, 0)})
    d.release((T, 0))
    assert d.lanes.held((T, 0)) == 0


def test_held_back_records_count_against_the_members_record_bound() -> None:
    """``max.poll.records`` bounds what a member holds uncommitted (R-POOL-3: redelivered after
    a crash <= members x max.poll.records), held-back records included."""
    runner = Recorder()
    d = dispatcher(runner, depth=10, max_records=5)
    d.submit([rec(0), rec(1), rec(2)])
    done = _drain(d)
    d.hold_back((T, 0), 0, done)
    assert d.room(Consumer(), {(T, 0), (T, 1)}, lambda _tp: False) == 2


def test_a_later_record_finished_first_is_committed_with_the_earlier_one() -> None:
    """Key mode: offset 1 (key b) ends and is processed before offset 0 (key a). The batch of 0
    commits past both (the watermark), not just past 0 -- else 1 stays uncommitted until the
    partition's next record, at the end of a stream for good (found by the lab's harness)."""
    cfg = InflightConfig(mode=Concurrency.KEY, max_records=50, depth=10)
    runner = Recorder()
    d = Dispatcher(cfg, runner)
    d.lanes.add(rec(0, key="a"))
    d.lanes.add(rec(1, key="b"))
    started = d.lanes.startable(10)
    assert [r.offset for r in started] == [0, 1]
    assert d.lanes.finish(started[1])  # offset 1 ends first: its batch may commit only to 0
    assert d.committable({(T, 0): 2}, {}) == {(T, 0): 0}
    assert d.lanes.finish(started[0])
    assert d.committable({(T, 0): 1}, {}) == {(T, 0): 2}
    assert d.committable({(T, 0): 1}, {(T, 0): (1, 0.5)}) == {(T, 0): 1}  # a blocked record caps
    d.close()


def msg(offset: int, partition: int = 0) -> FakeMessage:
    return FakeMessage(T, partition, offset, b"k", b"")


def test_a_partition_is_paused_mid_fetch_the_moment_it_holds_its_depth() -> None:
    """librdkafka hands out a backlog a partition at a time: the loop takes records one by one
    and the dispatcher pauses a partition as soon as it has its buffer's worth (a pause drops
    what librdkafka prefetched for it), so the rest of the fetch comes from other partitions."""
    gate = Gate()
    d = dispatcher(gate, depth=2)
    consumer = Consumer()
    d.room(consumer, {(T, 0), (T, 1)}, lambda _tp: False)
    d.fetched(consumer, msg(0))
    assert consumer.paused == set()
    d.fetched(consumer, msg(1))
    assert consumer.paused == {0}  # before submit: the next record comes from partition 1
    d.submit([rec(0), rec(1)])
    d.fetched(consumer, msg(0, partition=1))
    assert consumer.paused == {0}  # a new turn counts afresh: partition 1 holds one
    d.submit([rec(0, partition=1)])
    d.room(consumer, {(T, 0), (T, 1)}, lambda _tp: False)
    assert consumer.paused == {0}  # still full: room() agrees and does not resume it
    gate.release.set()
    d.close()


def test_a_retried_partition_is_left_to_the_retry_s_pause() -> None:
    runner = Recorder()
    d = dispatcher(runner, depth=2)
    consumer = Consumer()
    d.submit([rec(0)])
    done = _drain(d)
    d.hold_back((T, 0), 0, done)
    d.fetched(consumer, msg(1))
    d.fetched(consumer, msg(2))
    assert consumer.paused == set()  # the runtime paused it for the backoff; release resumes
    d.close()


def test_the_depth_covers_a_refetch_within_the_members_record_bound() -> None:
    """A resumed partition may wait about ``REFETCH_S`` for its next fetch (librdkafka's broker
    thread notices a resume at its next wake-up): with 400 ms steps a partition holds four
    records (one running, three covering 1.2 s), at most its share of ``max_records``; an
    explicit ``--partition-buffer`` (``cover_refetch`` off) is kept as given."""
    cfg = InflightConfig(max_records=50, depth=2, cover_refetch=True)
    d = Dispatcher(cfg, Recorder())
    assert d._depth(12) == 2  # no step time known yet
    d.step_s = 0.4
    assert d._depth(12) == 1 + math.ceil(REFETCH_S / 0.4) == 4
    assert d._depth(20) == 2  # 50 // 20: the bound shared by the partitions, never below depth
    d.step_s = 2.0
    assert d._depth(12) == 2  # R-LAB-1's 2 s steps: one waiting record covers a refetch
    d.close()
    plain = Dispatcher(InflightConfig(max_records=50, depth=2), Recorder())
    plain.step_s = 0.4
    assert plain._depth(12) == 2
    plain.close()
