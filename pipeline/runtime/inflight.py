"""In-flight steps across polls: slow work on worker threads while the loop keeps polling.

The consumer runtime (``loop.py``) calls this at four clearly marked points when a member is
built with a :class:`Dispatcher` (worker pools); the gateway inbox runs without one.

1. ``room()`` before each fetch: how many more records the member may hold (``max.poll.records``
   bounds fetched-but-uncommitted records, hence redeliveries after a crash), and it pauses
   partitions whose lane buffer is full / resumes those with room. ``poll`` goes on regardless,
   so ``max.poll.interval.ms`` never expires because steps are slow (R-POOL-5, R-FAIL-2).
   ``wait_s()`` then says how long that poll may block (below).
2. ``fetched(consumer, msg)`` for each record as the loop takes it (one at a time): a partition
   is paused the moment it holds its buffer's worth, so the rest of a fetch comes from other
   partitions (librdkafka hands a backlog out a partition at a time); ``submit(records)``
   after the fetch: records join their lanes (:mod:`.lanes`); idle lanes start. (Refusing
   records past the depth and seeking back to them was tried first and taken out: every seek
   stalled its partition at low rates -- the lab's ``tiny`` scenario fell to 0.64 of its
   offered throughput. A pause drops only what librdkafka prefetched, never a taken record.)
3. ``completed()`` each turn: finished steps, in the order they finished, for the runtime's one
   ``process()`` path (decide, one transaction, commit); ``committable()`` turns the batch's
   handled offsets into the lanes' watermark.
4. ``hold_back(tp, offset, handed)`` when a record is retried: the partition is paused for the
   backoff and its records from that offset on wait here, in memory, until ``release(tp)`` puts
   them back into their lanes (no seek, no re-read: a re-read waited out a fresh fetch).
5. ``revoke(tps)`` from ``on_revoke`` (and at shutdown): queued records are dropped, running
   steps are awaited up to ``revoke_wait_s`` and handed back to be processed and committed
   before the partition goes; a step still running then is given up (its late result is
   discarded, the new owner re-reads the record and reuses the stored result if it was stored).

**Waking up for a finished step.** A finished step frees its lane only when the poll thread
collects it, and ``consumer.poll`` cannot be woken. So while steps run, ``wait_s()`` blocks on
the done queue instead whenever no record fetched now could start: every assigned partition
paused, or every step slot (``max_in_flight``) running, or -- one lane per partition -- a step
running on every partition that is not paused. That is the saturated member (a backlog): its
lanes restart the moment a step ends, and the loop turns once per finished step instead of
spinning; what librdkafka fetched meanwhile is taken by the next turn. Otherwise (a lane is
idle and a record may arrive for it) the poll is shortened to ``1/WAKE_FRACTION`` of the mean
step time (at least ``MIN_WAKE_S``): a finished step then waits on average 1/40 of a step to be
collected. With no step running, and for steps of seconds, the poll keeps its full timeout (no
busy loop when idle).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import queue
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from pipeline.record import Record

from .lanes import TP, Concurrency, Lanes

log = logging.getLogger(__name__)

REFETCH_S = 1.0  # how long a resumed partition may wait for its next fetch (see ``_depth``)
WAKE_FRACTION = 20  # poll slices of a twentieth of the mean step while steps run
MIN_WAKE_S = 0.001
_STEP_EWMA = 0.1  # weight of the newest step in the mean step time


class _Every:
    """The set of every partition (``tp in _EVERY`` is always true)."""

    def __contains__(self, _tp: object) -> bool:
        return True


_EVERY = _Every()


class StepRunner(Protocol):
    """The slow half of a pool handler, run on a worker thread (the fast half is ``handle``)."""

    def run(self, record: Record) -> None: ...


class InflightObserver(Protocol):
    def in_flight(self, n: int) -> None: ...

    def paused_count(self, n: int) -> None: ...

    def given_up_count(self, n: int) -> None: ...


@dataclass(frozen=True, kw_only=True)
class InflightConfig:
    """``max_records`` bounds held records per member; ``depth`` per partition (lane buffer)."""

    mode: Concurrency = Concurrency.PARTITION
    max_in_flight: int = 64
    max_records: int = 50
    depth: int = 2
    revoke_wait_s: float = 30.0
    cover_refetch: bool = False  # raise ``depth`` to cover a refetch (``Dispatcher._depth``)


class Dispatcher:
    """Worker threads + lanes + watermark. Every method is called from the poll thread only;
    workers touch nothing but the done queue."""

    def __init__(
        self,
        config: InflightConfig,
        runner: StepRunner,
        *,
        observer: InflightObserver | None = None,
    ) -> None:
        self.config = config
        self.runner = runner
        self.lanes = Lanes(config.mode, depth=config.depth)
        self.observer = observer
        self._pool = ThreadPoolExecutor(config.max_in_flight, thread_name_prefix="step")
        self._done: queue.SimpleQueue[tuple[Record, float]] = queue.SimpleQueue()
        self._finished: list[Record] = []
        self._paused: set[TP] = set()
        self._held_back: dict[TP, list[Record]] = {}  # a retry's records, back at release()
        self._fetchable = True  # some assigned partition is neither paused nor held elsewhere
        self._taken: dict[TP, int] = {}  # records fetched this turn, not yet submitted
        self.step_s: float | None = None  # mean step time (EWMA), for the poll slice

    # 1 -- before a fetch
    def room(self, consumer: Any, assigned: set[TP], held_elsewhere: Callable[[TP], bool]) -> int:
        """Pause full partitions (all of them when the member holds ``max_records``), resume
        ones with room unless a retry paused them; returns how many records may be fetched."""
        self._collect()
        self.lanes.depth = self._depth(len(assigned))
        held = self.lanes.total_held() + sum(len(r) for r in self._held_back.values())
        room = max(0, self.config.max_records - held)
        full = {tp for tp in self.lanes.partitions() if self.lanes.full(tp)}
        if room == 0:
            full |= assigned
        pause = full - self._paused
        resume = {tp for tp in self._paused - full if not held_elsewhere(tp)}
        with contextlib.suppress(Exception):  # a revoked partition: nothing to do
            if pause:
                consumer.pause([TopicPartition(t, p) for t, p in pause])
            if resume:
                consumer.resume([TopicPartition(t, p) for t, p in resume])
        self._paused = (self._paused | pause) - (self._paused - full)
        busy = self._busy_lanes()
        self._fetchable = any(
            tp not in full and not held_elsewhere(tp) and tp not in busy for tp in assigned
        )
        if self.observer:
            self.observer.paused_count(len(self._paused))
        return room

    def _depth(self, assigned: int) -> int:
        """Records a partition may hold: the configured depth, raised (``cover_refetch``) so
        the records waiting behind a running step last until a resumed partition is fetched
        again -- at most the member's record bound shared by its partitions.

        librdkafka notices a resume on its broker thread's next wake-up: a fetch response, or
        about a second later when every partition is paused (a drain: each holds its depth).
        With 400 ms steps and one record waiting, a lane ran dry on every other step (the
        worked example's drain, time scale 0.2); three waiting cover the second."""
        depth = self.config.depth
        if self.config.cover_refetch and self.step_s:
            cover = 1 + math.ceil(REFETCH_S / self.step_s)
            depth = max(depth, min(cover, self.config.max_records // max(1, assigned)))
        return depth

    def _busy_lanes(self) -> set[TP] | _Every:
        """Partitions whose record, fetched now, could only queue: every one when all step
        slots run, else (one lane per partition) those with a step running. A turn that can
        fetch nothing that would start waits for a finished step instead (``wait_s``); the next
        turn fetches what came meanwhile just as well."""
        running = self.lanes.running()
        if len(running) >= self.config.max_in_flight:
            return _EVERY
        if self.lanes.mode is Concurrency.KEY:
            return set()
        return {r.tp for r in running}

    def wait_s(self, idle_s: float) -> float:
        """How long the next poll may block (see the module docstring): ``idle_s`` with no step
        running; else 0 after waiting (up to ``idle_s``) for a step to end when nothing can be
        fetched, or a slice of the mean step time."""
        if not self.lanes.running():
            return idle_s
        if not self._fetchable:
            self._collect(timeout=idle_s)
            return 0.0
        if self.step_s is None:
            return min(idle_s, 10 * MIN_WAKE_S)
        return min(idle_s, max(MIN_WAKE_S, self.step_s / WAKE_FRACTION))

    # 2 -- during and after a fetch
    def fetched(self, consumer: Any, msg: Any) -> None:
        """One record was just taken from the consumer (the loop takes them one at a time):
        pause its partition the moment the partition holds its buffer's worth (``depth``).

        librdkafka hands a backlog out a partition at a time, so one ``consume(50)`` brought
        50 records of one partition, the member's record bound was spent on one lane and its
        other lanes sat idle (the worked example drained with half its lanes busy). A pause
        drops what librdkafka prefetched for the partition (its version barrier), so the next
        record comes from another partition, and a resume fetches again from the partition's
        position: nothing is sought, lost or read twice."""
        if msg.error() is not None:
            return
        tp = (msg.topic(), msg.partition())
        taken = self._taken[tp] = self._taken.get(tp, 0) + 1
        if tp in self._paused or tp in self._held_back:
            return  # already paused (full, or a retry's pause owns it)
        if self.lanes.held(tp) + taken >= self.lanes.depth:
            with contextlib.suppress(Exception):  # a revoked partition: nothing to pause
                consumer.pause([TopicPartition(*tp)])
                self._paused.add(tp)

    def submit(self, records: list[Record]) -> None:
        """Records join their lanes (a full partition is paused at once, see ``fetched``)."""
        self._taken.clear()
        for rec in records:
            if self.lanes.holds(rec):
                continue  # fetched twice
            held_back = self._held_back.get(rec.tp)
            if held_back is not None:  # behind a retry's records, never ahead of them
                if all(r.offset != rec.offset for r in held_back):
                    held_back.append(rec)
                continue
            self.lanes.add(rec)
        self._start()

    def _start(self) -> None:
        busy = len(self.lanes.running())
        for rec in self.lanes.startable(self.config.max_in_flight - busy):
            self._pool.submit(self._work, rec)
        if self.observer:
            self.observer.in_flight(len(self.lanes.running()))

    def _work(self, rec: Record) -> None:
        t0 = time.monotonic()
        try:
            self.runner.run(rec)
        except Exception:  # the runner keeps its own failures; never lose the completion
            log.exception("step runner failed for %s", rec.ref)
        finally:
            self._done.put((rec, time.monotonic() - t0))

    # 3 -- each turn
    def _collect(self, timeout: float | None = None) -> None:
        while True:
            try:
                rec, took = self._done.get(timeout=timeout) if timeout else self._done.get_nowait()
            except queue.Empty:
                return
            timeout = None
            self.step_s = (
                took if self.step_s is None else self.step_s + _STEP_EWMA * (took - self.step_s)
            )
            if self.lanes.finish(rec):
                self._finished.append(rec)
            self._start()

    def completed(self) -> list[Record]:
        self._collect()
        out, self._finished = self._finished, []
        return out

    def committable(
        self, handled: dict[TP, int], blocked: dict[TP, tuple[int, float]]
    ) -> dict[TP, int]:
        """The batch's partitions at their watermark (capped by a blocked record).

        The watermark, not the batch's own highest offset: in key mode a partition's later
        record may finish (and be processed, in an earlier batch) before an earlier one, and
        committing only this batch's ``handled`` offset would leave that later record
        uncommitted until the partition's next record -- at the end of a stream, for good. Every
        record below the watermark was processed: a partition's finished records all reach
        ``process()`` in the turn they are collected, and a failed one rewinds it."""
        out: dict[TP, int] = {}
        for tp, nxt in handled.items():
            mark = self.lanes.watermark(tp)
            offset = nxt if mark is None else mark
            if tp in blocked:
                offset = min(offset, blocked[tp][0])
            out[tp] = offset
        return out

    def hold_back(self, tp: TP, offset: int, handed: Iterable[Record] = ()) -> None:
        """Handle ``tp`` again from ``offset`` after a retry's pause, **without re-reading it**.

        The records from there on -- ``handed`` (the batch's records the runtime did not apply:
        the retried one and those after it) and the lanes' queued and running ones -- are kept
        here, in offset order, and go back into their lanes at :meth:`release`, just before the
        partition is resumed. The consumer's position stays past them, so nothing is fetched
        twice; a seek instead would wait out a fresh fetch (up to ``fetch.wait.max.ms``) on
        every retry, which made a poison record's backoffs run half a second long each.
        Nothing from ``offset`` on is committable meanwhile (the lanes' floor)."""
        self._paused.discard(tp)  # the retry's pause owns it now
        seek, dropped = self.lanes.rewind(tp, offset)
        kept = {r.offset: r for r in self._held_back.get(tp, ())}
        kept.update((r.offset, r) for r in (*handed, *dropped) if r.tp == tp and r.offset >= seek)
        self._held_back[tp] = sorted(kept.values(), key=lambda r: r.offset)

    def release(self, tp: TP) -> None:
        """The retry's pause is over: the held-back records rejoin their lanes, in order."""
        records = self._held_back.pop(tp, ())
        running = {id(r) for r in self.lanes.running({tp})}
        for rec in records:  # a step still running since the hold-back is discarded when it
            self.lanes.add(copy.copy(rec) if id(rec) in running else rec)  # ends: a copy reruns
        if records:
            self._start()

    # 4 -- rebalance and shutdown
    def revoke(self, tps: set[TP]) -> list[Record]:
        """Wait (bounded) for running steps of ``tps``; returns finished ones to process."""
        deadline = time.monotonic() + self.config.revoke_wait_s
        self.lanes.forget_queued(tps)
        self._drop_held_back(tps)
        while self.lanes.running(tps) and (left := deadline - time.monotonic()) > 0:
            self._collect(timeout=min(left, 0.1))
        ready = [r for r in self._finished if r.tp in tps]
        self._finished = [r for r in self._finished if r.tp not in tps]
        return ready

    def forget(self, tps: set[TP]) -> None:
        gone = self.lanes.forget(tps)
        self._drop_held_back(tps)
        self._paused -= tps
        self._finished = [r for r in self._finished if r.tp not in tps]
        if gone:
            log.warning("gave up %d in-flight step(s) of revoked partitions", len(gone))
            if self.observer:
                self.observer.given_up_count(len(gone))

    def _drop_held_back(self, tps: set[TP]) -> None:
        """Revoked or lost: the new owner reads them from the committed offset."""
        for tp in tps:
            self._held_back.pop(tp, None)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
