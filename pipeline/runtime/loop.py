"""The consumer runtime: poll a batch, decide every record, one transaction, commit, effects.

Per batch, in this order (``docs/runtime.md`` has the crash windows):

1. **Decide** each record in partition order: parked if its key is quarantined; if its ``msgId``
   was already applied, it is dropped and counted only once the handler's ``verify`` stage
   passed (a tampered copy is dead-lettered, never taken for a duplicate); else the handler
   stages its writes and returns an outcome, and :func:`pipeline.runtime.decide.decide` says
   what happens. ``Retry`` blocks the rest of that partition for this batch (order is kept) and
   is rescheduled by pausing the partition (``poll`` goes on, so ``max.poll.interval.ms`` is
   never blown) and seeking back to the record -- or, in a worker pool, by holding its records
   in memory until the pause ends (``inflight.hold_back``). A spent retry budget becomes
   ``Quarantine`` (ordered flows) or ``DeadLetter``.
   A failed store READ (dedupe lookup, quarantine state) backs the batch off exactly like a
   failed transaction: nothing escapes the loop, the batch is re-read later.
2. **One database transaction** for the whole batch: dedupe rows, effects, dead letters, parks.
   If it fails, nothing is committed and the batch is re-read after a backoff.
3. **Synchronous offset commit** of each partition's handled prefix, checking every partition's
   result. An offset is committed only when every earlier record of that partition is durable
   (pull: at-least-once) or deliberately given up (forward: at-most-once).
4. **After-commit effects** (the forward path's inject) -- only when the commit succeeded. On a
   commit error nothing is injected: a visible loss, never a double injection.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import FencedError, StoreError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.kafka.clients import ClientFactory, new_consumer
from pipeline.kafka.logs import ClientLog
from pipeline.kafka.settings import OffsetReset, consumer_config
from pipeline.record import Record
from pipeline.runtime import retry_marks
from pipeline.runtime.context import FailureContext, Tries
from pipeline.runtime.decide import classify, decide
from pipeline.runtime.offsets import find_lost_offsets, lost_error, raise_if_offsets_lost
from pipeline.runtime.outcomes import Ack, DeadLetter, Outcome, Quarantine, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import with_retry
from pipeline.store.retry import StoreRetry

from .commits import AsyncCommits, commit_while_coordinator_moves
from .dedupe import claim_ids, release_ids
from .inflight import Dispatcher
from .metrics import RuntimeMetrics
from .ports import DeadLetterSink, Handler, Prepares, QuarantinePort, Verifies, Warms
from .staging import Staged

log = logging.getLogger(__name__)

TP = tuple[str, int]
# A store blip is absorbed inline; a longer outage backs the batch off without blocking poll.
_READ_RETRY = StoreRetry(initial_s=0.05, max_s=0.5, budget_s=2.0)
# Fenced within this long after the client's own session timeout = fenced by itself.
_SELF_FENCE_WINDOW_S = 30.0


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """One consumer-group member: group, topics, static id, dedupe scope, batch, retry."""

    bootstrap: str
    group_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    scope: str | None = None  # dedupe/quarantine scope; defaults to the group id
    dedupe_header: str | None = "msgId"  # None: no dedupe rows at all (an experiment knob)
    ordered: bool = True  # spent retries quarantine the key (True) or just dead-letter (False)
    batch_size: int = 500
    poll_timeout_s: float = 0.05
    retry: BackoffPolicy = field(default_factory=BackoffPolicy)
    offset_reset: OffsetReset = OffsetReset.EARLIEST
    release_check_s: float = 1.0
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dedupe_scope(self) -> str:
        return self.scope or self.group_id


@dataclass
class _Batch:
    staged: Staged = field(default_factory=Staged)
    next_offset: dict[TP, int] = field(default_factory=dict)
    first_offset: dict[TP, int] = field(default_factory=dict)
    blocked: dict[TP, tuple[int, float]] = field(default_factory=dict)  # tp -> (offset, delay)
    applied_ids: set[str] = field(default_factory=set)
    quarantined: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    records: Sequence[Record] = ()  # what process() was given (a retry hands some back)

    def count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1


class _KeepQuarantined(Exception):
    """A released record failed transiently again: roll the release's transaction back."""


def _effect_failed() -> None:
    log.exception("after-commit effect failed")


def _park(q: QuarantinePort, scope: str, key: str, rec: Record, session: Session) -> None:
    q.park(session, scope, key, rec)


def _quarantine(
    q: QuarantinePort, scope: str, key: str, reason: str, ref: str, session: Session
) -> None:
    q.quarantine(session, scope, key, reason, ref)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ConsumerRuntime:
    """Runs one consumer-group member. See the module docstring for the per-batch contract."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        handler: Handler,
        sessions: sessionmaker[Session],
        dead_letters: DeadLetterSink,
        quarantine: QuarantinePort | None = None,
        metrics: RuntimeMetrics | None = None,
        consumer_factory: ClientFactory = new_consumer,
        fault_after_commit: Callable[[int], None] | None = None,
        inflight: Dispatcher | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.config = config
        # Worker pools: steps run on worker threads across polls (``inflight.py``); the hook
        # points below are marked ``# inflight:``. ``None`` = every record handled in the loop.
        self.inflight = inflight
        self.handler = handler
        # the handler's verify stage, run before a dedupe drop (seed 000 §2.1 order)
        self.verify = handler.verify if isinstance(handler, Verifies) else None
        # the handler's batch stage before the transaction (the gateway verifies signatures
        # of the whole batch on a thread pool there)
        self.prepare = handler.prepare if isinstance(handler, Prepares) else None
        self.sessions = sessions
        self.dead_letters = dead_letters
        self.quarantine = quarantine
        self.metrics = metrics
        # the client's log, to tell librdkafka's self-fencing after a session timeout from a
        # real second member with our group.instance.id (see step())
        self.client_log = ClientLog()
        self.async_commits = AsyncCommits(
            static_member=config.instance_id is not None, on_failure=self._async_commit_failed
        )
        self._conf = consumer_config(
            config.bootstrap,
            config.group_id,
            offset_reset=config.offset_reset,
            instance_id=config.instance_id,
            **{
                "logger": self.client_log,
                "on_commit": self.async_commits.on_commit,
                **dict(config.consumer_overrides),
            },
        )
        self._consumer_factory = consumer_factory
        self.consumer = consumer_factory(self._conf)
        # Fault injection for crash tests (wired only by an entry point, never by default):
        # called after a successful commit, before the batch's after-commit effects.
        self.fault_after_commit = fault_after_commit or hooks.fault_after_commit
        self.hooks = hooks  # planted bugs for the chaos suite (pipeline/hooks.py); off by default
        self._attempts: dict[tuple[str, int, int], Tries] = {}
        self._paused: dict[TP, float] = {}
        self._assigned: set[TP] = set()
        self._next_release_check = 0.0
        self._stale_quarantine = False  # a refresh failed: hold every partition until one works
        self._warm = False
        self._member_id: str | None = None  # the client's member id at its last assignment
        self.batches = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def subscribe(self) -> None:
        self.warm_up()
        self.consumer.subscribe(
            list(self.config.topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def warm_up(self) -> None:
        """Pay the store's first-use costs before the first batch, not inside it: the dedupe
        claim and the handler's own writes (:class:`Warms`) run once in a transaction that is
        rolled back, so SQLAlchemy compiles and caches them and the pool holds a connection."""
        if self._warm:
            return
        self._warm = True
        session = self.sessions()
        try:
            session.begin()
            claim_ids(session.connection(), self.config.dedupe_scope, ["\x00warm-up"], 0)
            if isinstance(self.handler, Warms):
                self.handler.warm(session)
        except (SQLAlchemyError, StoreError) as exc:  # the first batch pays instead
            log.info("store warm-up skipped: %s", exc)
        finally:
            session.rollback()
            session.close()

    def run(self, stop: threading.Event) -> None:
        self.subscribe()
        try:
            while not stop.is_set():
                self.step()
            if self.inflight is not None:  # inflight: graceful stop -- finish or give up, commit
                self._settle_inflight({*self._assigned})
        finally:
            self.close()
            if self.inflight is not None:
                self.inflight.close()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # already closed
            if self.async_commits.sent:  # the pull path's last async commits, confirmed
                self.async_commits.flush(self.consumer)
            self.consumer.close()

    def _async_commit_failed(self, error: str) -> None:
        if self.metrics:
            self.metrics.commit_failures.labels(self.config.group_id).inc()
        log.warning("asynchronous offset commit failed (redelivery is absorbed): %s", error)

    # -- rebalance ---------------------------------------------------------------------------
    def _count_rebalance(self, kind: str) -> None:
        if self.metrics:
            self.metrics.rebalances.labels(self.config.group_id, kind).inc()

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._refuse_lost_offsets(partitions)
        # librdkafka keeps an application pause across a revoke: a partition paused here before
        # it moved away would come back paused forever (we forgot it). Assigned = unpaused.
        with contextlib.suppress(Exception):
            self.consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in partitions])
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        self._member_id = _member_id(self.consumer)
        self._refresh_quarantine()
        self._count_rebalance("assign")

    def _refuse_lost_offsets(self, partitions: list[TopicPartition]) -> None:
        """Seed 001 scenario 7, never a silent skip: with ``auto.offset.reset=earliest`` (which a
        brand-new group needs) librdkafka would jump a committed offset that fell off retention
        to the log start without a word. Checked at assignment: a lost range is counted, logged
        with its numbers and raised (``OffsetsLostError`` out of ``poll``; a gateway exits 3).
        A partition this group never committed but whose log no longer starts at 0 is reported
        too (ERROR line, the metric) and not refused: Kafka cannot tell a new group from one
        that died before its first commit, and a new group must be able to start.
        A check the broker cannot answer now is logged and skipped - the assignment goes on."""
        group = self.config.group_id
        try:
            lost = find_lost_offsets(self.consumer, group, partitions, timeout_s=5.0)
            committed = self.consumer.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=5.0
            )
            self._continue_retries(committed)
            unread = [(tp, low) for tp, low in self._never_committed_starts(committed) if low > 0]
        except Exception as exc:  # noqa: BLE001 - a broker blip must not fail the assignment
            log.warning("could not check %s for offsets lost to retention: %s", partitions, exc)
            return
        for tp, low in unread:
            if self.metrics:
                self.metrics.offsets_lost.labels(group).inc(low)
            log.error(
                "group %r %s[%d]: never committed, and the log starts at %d: %d offset(s) were "
                "deleted before group %r read them (a new group, or one that died before its "
                "first commit)",
                group, tp.topic, tp.partition, low, low, group,
            )  # fmt: skip
        for rng in lost:
            if self.metrics:
                self.metrics.offsets_lost.labels(self.config.group_id).inc(rng.lost)
            log.error("%s", lost_error(rng))
        if lost:
            raise lost_error(lost[0])

    def _never_committed_starts(
        self, committed: list[TopicPartition]
    ) -> list[tuple[TopicPartition, int]]:
        out = []
        for tp in committed:
            if tp.offset < 0:
                low, _high = self.consumer.get_watermark_offsets(tp, timeout=5.0, cached=False)
                out.append((tp, int(low)))
        return out

    def _refresh_quarantine(self) -> bool:
        """Re-read quarantine state; on a store error hold every partition until it works
        (a record of a key quarantined by the previous owner must not be handled meanwhile)."""
        if self.quarantine is None:
            return True
        try:
            self.quarantine.refresh(self.config.dedupe_scope)
        except (SQLAlchemyError, StoreError) as exc:
            self._store_failed("quarantine refresh", exc)
            self._stale_quarantine = True
            self._pause_all()  # again: an assignment may have added partitions
            return False
        if self._stale_quarantine:
            self._stale_quarantine = False
            held = [TopicPartition(t, p) for t, p in self._assigned if (t, p) not in self._paused]
            with contextlib.suppress(Exception):  # a revoked partition: nothing to resume
                self.consumer.resume(held)
        return True

    def _pause_all(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.pause([TopicPartition(t, p) for t, p in self._assigned])

    def _store_failed(self, what: str, exc: Exception) -> None:
        if self.metrics:
            self.metrics.store_failures.labels(self.config.group_id).inc()
        log.warning("%s failed (%s); retrying after a backoff", what, exc)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned -= gone
        self.async_commits.forget(gone)
        for tp in gone:
            self._paused.pop(tp, None)
        self._attempts = {k: v for k, v in self._attempts.items() if (k[0], k[1]) not in gone}

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        # Forward batches commit synchronously before the next poll; pull batches may have an
        # async commit in flight (flushed below); steps still in flight end (bounded) and commit
        # before the partition goes.
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self._settle_inflight(revoked)
        # the pull path's async commits of these partitions, confirmed before they move
        result = self.async_commits.flush(self.consumer, revoked)
        if not result.ok:
            log.warning("commit on revoke failed (the new owner re-reads): %s", result.errors)
        self._forget(partitions)
        self._count_rebalance("revoke")

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if self.inflight is not None:  # inflight: lost, not revoked -- nothing may be committed
            self.inflight.forget({(tp.topic, tp.partition) for tp in partitions})
        self._forget(partitions)

    def _settle_inflight(self, tps: set[TP]) -> None:
        """Revoke rule: await the partitions' running steps (bounded), process and commit what
        finished, give up the rest (their offsets stay uncommitted)."""
        if self.inflight is None or not tps:
            return
        done = self.inflight.revoke(tps)
        if done:
            self.process(sorted(done, key=lambda r: (r.tp, r.offset)))
        self.inflight.forget(tps)
        self._count_rebalance("lost")

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> int:
        """Poll once and process what came back; returns the number of records seen.

        A static member fenced right after timing out its own session was fenced by itself
        (:class:`pipeline.kafka.logs.ClientLog`): it re-joins with a fresh client instead of
        stopping. Any other fencing is a second member with our id, and stops this one.
        """
        try:
            return self._step()
        except FencedError:
            if self.config.instance_id is None or not self._fenced_by_itself():
                raise
        self._rejoin()
        return 0

    def _fenced_by_itself(self) -> bool:
        """A static member's fencing came from its own client: it timed out its session
        (``SESSTMOUT``) lately, or its member id is no longer the one it was assigned under --
        librdkafka re-joined on its own. The second check is needed because the client's log
        lines reach us only through ``poll``: a synchronous commit that blocked through a broker
        outage comes back fenced before the session timeout's line was served (chaos #8). A
        second member with our id leaves our member id as it was (measured: a fenced client's
        ``memberid()`` is unchanged, before and after its fatal error)."""
        timed_out = self.client_log.timed_out_within(_SELF_FENCE_WINDOW_S)
        was, now = self._member_id, _member_id(self.consumer)
        # "" now: the client dropped its member id to re-join (after a session timeout that may
        # lie minutes back, when the broker was away longer than that: chaos #8, 75 s)
        moved = bool(was) and now is not None and now != was
        return timed_out or moved

    def _rejoin(self) -> None:
        """Drop the fenced client as if every partition was lost (nothing more is committed
        through it), then join again under the same group.instance.id."""
        log.warning(
            "group %s member %s: fenced right after its own session timeout (librdkafka "
            "re-joined under a new member id and fenced the old one); joining again with a "
            "fresh client",
            self.config.group_id,
            self.config.instance_id,
        )
        lost = [TopicPartition(t, p) for t, p in self._assigned]
        self._on_lost(self.consumer, lost)
        self.close()
        # the dropped client's late commit results (a refused async commit, served while it
        # closed) belong to the fencing being handled now, not to the fresh client (chaos #9:
        # a second "fenced" 0.15 s after the re-join stopped the gateway)
        self.async_commits.reset()
        self.consumer = self._consumer_factory(self._conf)
        self._member_id = None  # until the fresh client's first assignment
        self.subscribe()
        self._count_rebalance("rejoin")

    def _step(self) -> int:
        self.async_commits.retry(self.consumer)
        fenced = self.async_commits.fencing()
        if fenced is not None:
            cfg = self.config
            raise FencedError(
                f"group {cfg.group_id} member {cfg.instance_id or '(dynamic)'} was fenced "
                f"(an asynchronous offset commit was refused): {fenced}"
            )
        if self._stale_quarantine and not self._refresh_quarantine():
            msg = self.consumer.poll(self.config.poll_timeout_s)  # heartbeats; all paused
            if msg is not None and msg.error() is not None:
                self._on_consume_error(msg.error(), msg)
            elif msg is not None:  # fetched before the pause: rewind, so it is not lost
                with contextlib.suppress(Exception):
                    self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
            return 0
        self._resume_due()
        self._maybe_release()
        room, wait = None, self.config.poll_timeout_s
        if self.inflight is not None:  # inflight: pause full partitions, bound held records,
            room = self.inflight.room(self.consumer, self._assigned, self._paused.__contains__)
            wait = self.inflight.wait_s(wait)  # and wake up soon after a step ends
        messages = self._fetch(room, wait)
        records: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                records.append(Record.from_message(msg))
                continue
            self._on_consume_error(err, msg)
        if self.inflight is None:
            if records:
                self.process(records)
            return len(records)
        # inflight: records join their lanes; finished steps take the one process() path, in
        # partition-offset order so a blocked record's successors are never committed past it
        self.inflight.submit(records)
        done = self.inflight.completed()
        if done:
            self.process(sorted(done, key=lambda r: (r.tp, r.offset)))
        return len(records)

    def _fetch(self, room: int | None = None, wait_s: float | None = None) -> list[Any]:
        """Whatever is buffered now, else block for the FIRST record only.

        ``consume(n, timeout)`` waits until ``n`` records or the timeout, which adds up to the
        timeout to every record's latency at low rates; this never waits once one has arrived.
        """
        batch = (
            self.config.batch_size if room is None else max(1, min(room, self.config.batch_size))
        )
        if self.inflight is not None:
            return self._fetch_each(self.inflight, batch, wait_s)
        messages: list[Any] = self.consumer.consume(batch, 0)
        if messages:
            return messages
        first = self.consumer.poll(self.config.poll_timeout_s if wait_s is None else wait_s)
        if first is None:
            return []
        return [first, *self.consumer.consume(batch - 1, 0)]

    def _fetch_each(self, inflight: Dispatcher, batch: int, wait_s: float | None) -> list[Any]:
        """inflight: ``_fetch`` one record at a time, so the dispatcher pauses a partition the
        moment it has its buffer's worth (``Dispatcher.fetched``) and the rest of the batch
        comes from other partitions: one ``consume(batch)`` would hand out a backlog a
        partition at a time."""
        wait = self.config.poll_timeout_s if wait_s is None else wait_s
        out: list[Any] = []
        while len(out) < batch:
            got: list[Any] = self.consumer.consume(1, 0)
            if not got and not out:  # block for the first record only
                first = self.consumer.poll(wait)
                got = [] if first is None else [first]
            if not got:
                break
            out.extend(got)
            inflight.fetched(self.consumer, got[0])
        return out

    def _on_consume_error(self, err: KafkaError, msg: Any) -> None:
        # seed 001 scenario 7: names group, partition, committed offset and how many were lost
        raise_if_offsets_lost(self.consumer, msg, self.config.group_id)
        if err.fatal() or err.code() == KafkaError._FATAL:
            # librdkafka reports static-membership fencing (a second member with our
            # group.instance.id) as _FATAL on the consume path; the client is unusable now.
            raise FencedError(
                f"group {self.config.group_id} member {self.config.instance_id or '(dynamic)'} "
                f"is fenced or failed fatally: {err.str()}"
            )
        log.warning("consume error (librdkafka retries it): %s", err.str())

    def process(self, records: list[Record], *, releasing: str | None = None) -> None:
        cfg = self.config
        scope = cfg.dedupe_scope
        batch = _Batch(records=records)
        head = cfg.dedupe_header
        ids = [rec.header_str(head) for rec in records] if head else [None] * len(records)
        first = batch.first_offset
        for rec in records:
            if rec.tp not in first:
                first[rec.tp] = rec.offset
        if self.prepare is not None:
            self.prepare(records)  # the handler's batch stage, outside the transaction
        planted = False
        try:
            now = _now_ms()
            apart = None
            if self.hooks.dedupe_own_transaction:  # PLANTED BUG (tests only, pipeline/hooks.py)
                apart = self._claim_apart(scope, ids, now)
            with self.sessions.begin() as session:
                # the dedupe claim IS the lookup: one insert-or-ignore, no read transaction
                claimed = (
                    claim_ids(session.connection(), scope, filter(None, ids), now)
                    if apart is None
                    else apart
                )
                for rec, msg_id in zip(records, ids, strict=True):
                    if rec.tp in batch.blocked:
                        continue
                    self._decide(rec, msg_id, batch, claimed, now, releasing=releasing)
                if releasing is not None and batch.blocked:
                    raise _KeepQuarantined  # still failing transiently: roll back, try later
                planted = (
                    self.hooks.commit_before_transaction
                    and releasing is None
                    and not batch.staged.empty()
                )
                if planted:  # PLANTED BUG (tests only): the offsets commit before the rows
                    if not self._commit(batch, sync=True):
                        raise _KeepQuarantined  # roll back; the retries are scheduled
                    self.hooks.at(Window.COMMITTED_BEFORE_TRANSACTION)
                unused = claimed - batch.applied_ids
                if unused:  # dead-lettered, parked or retried: no dedupe row for them
                    release_ids(session.connection(), scope, unused)
                batch.staged.flush(session)
                if (
                    releasing is not None
                    and self.quarantine is not None
                    and releasing not in batch.quarantined  # failed again: stays quarantined
                ):
                    self.quarantine.complete_release(session, scope, releasing)
        except _KeepQuarantined:
            return
        except (SQLAlchemyError, StoreError) as exc:  # a read or the write: the batch backs off
            self._store_failed("the batch transaction", exc)
            self._back_off(batch, releasing=releasing)
            return
        if releasing is None and not planted and not self._commit(batch):
            return
        batch.staged.run_effects(committed=True, on_error=_effect_failed)
        self._schedule_retries(batch)
        self.batches += 1
        if self.metrics:
            for outcome, n in batch.counts.items():
                self.metrics.records.labels(cfg.group_id, outcome).inc(n)

    def _commit(self, batch: _Batch, *, sync: bool = False) -> bool:
        """Commit the batch's offsets: synchronously when an at-most-once effect waits for it
        (forward path: commit before inject), else asynchronously (pull path: a lost commit
        redelivers what dedupe absorbs). False when a synchronous commit failed (retries are
        scheduled); raises :class:`FencedError` when fenced."""
        cfg = self.config
        offsets, marks = self._retry_marks(batch)
        if self.inflight is not None:  # inflight: never past a record queued or running
            offsets = self.inflight.committable(offsets, batch.blocked)
        if not sync and not batch.staged.needs_sync_commit():
            if offsets:
                self.async_commits.commit(self.consumer, offsets, marks)
            return True
        result, retries = commit_while_coordinator_moves(self.consumer, offsets, marks)
        if retries:
            if self.metrics:
                self.metrics.commit_retries.labels(cfg.group_id).inc(retries)
            if result.ok:
                log.info(
                    "offset commit went through on try %d (the coordinator moved)", retries + 1
                )
        if not result.ok:
            if self.metrics:
                self.metrics.commit_failures.labels(cfg.group_id).inc()
            if result.fences(static_member=cfg.instance_id is not None):
                raise FencedError(
                    f"group {cfg.group_id} member {cfg.instance_id or '(dynamic)'} was "
                    f"fenced: another gateway with the same id took over, or this one "
                    f"stalled past its session timeout. Nothing from this batch is "
                    f"injected. {'; '.join(result.errors)}"
                )
            log.error("offset commit failed, forward effects skipped: %s", result.errors)
            batch.staged.run_effects(committed=False, on_error=_effect_failed)
            # a blocked record must still be sought back to: the position is past it
            self._schedule_retries(batch)
            return False
        self.async_commits.superseded(offsets)
        if self.fault_after_commit is not None:
            self.fault_after_commit(batch.staged.count_after_commit())
        return True

    def _retry_marks(self, batch: _Batch) -> tuple[dict[TP, int], dict[TP, str]]:
        """The batch's offsets, and for each partition blocked by a retried record that record's
        attempts as the commit's metadata (:mod:`pipeline.runtime.retry_marks`): a member that
        is assigned the partition next continues the count instead of starting it again."""
        offsets, marks = dict(batch.next_offset), {}
        for tp, (at, _delay) in batch.blocked.items():
            tries = self._attempts.get((*tp, at))
            if tries is not None:
                offsets[tp] = min(offsets.get(tp, at), at)
                marks[tp] = retry_marks.encode(at, tries)
        return offsets, marks

    def _continue_retries(self, committed: list[TopicPartition]) -> None:
        """At assignment: the attempts a previous owner committed for a retried record."""
        for tp in committed:
            got = retry_marks.decode(getattr(tp, "metadata", None))
            if got is not None and tp.offset >= 0:
                at, tries = got
                key = (tp.topic, tp.partition, at)
                mine = self._attempts.get(key)
                if mine is None or mine["attempts"] < tries["attempts"]:
                    self._attempts[key] = tries
                    log.info(
                        "%s[%d] offset %d: continuing its retries after %d attempt(s) elsewhere",
                        tp.topic, tp.partition, at, tries["attempts"],
                    )  # fmt: skip

    def _is_quarantined(self, scope: str, key: str) -> bool:
        q = self.quarantine
        assert q is not None
        return with_retry(
            lambda: q.is_quarantined(scope, key), what="quarantine read", policy=_READ_RETRY
        )

    def _decide(
        self,
        rec: Record,
        msg_id: str | None,
        batch: _Batch,
        claimed: set[str],
        now: int,
        *,
        releasing: str | None,
    ) -> None:
        cfg = self.config
        if self.quarantine is not None:
            key = rec.key_str
            if (
                key is not None
                and key != releasing
                and (key in batch.quarantined or self._is_quarantined(cfg.dedupe_scope, key))
            ):
                quarantine, scope = self.quarantine, cfg.dedupe_scope
                batch.staged.call(functools.partial(_park, quarantine, scope, key, rec))
                batch.next_offset[rec.tp] = rec.offset + 1
                batch.count("parked")
                return
        if msg_id is not None and (msg_id not in claimed or msg_id in batch.applied_ids):
            # Only a record that verifies may be dropped as a duplicate: a tampered copy of an
            # applied message is a dead letter with its reason, never a silent dedupe hit.
            refused = self.verify(rec) if self.verify is not None else None
            if refused is None:
                batch.next_offset[rec.tp] = rec.offset + 1
                batch.count("duplicate")
                if self.metrics:
                    self.metrics.dedupe_hits.labels(cfg.group_id).inc()
                return
            self._settle(rec, refused, batch, None, now)
            return
        staged = batch.staged
        mark = staged.mark()
        try:
            outcome: Outcome = self.handler.handle(rec, staged)
        except Exception as exc:  # noqa: BLE001 - every handler error maps onto an outcome
            outcome = classify(exc)
        if isinstance(outcome, Ack):  # the hot path: nothing to decide
            self._settle(rec, outcome, batch, msg_id, now)
            return
        staged.rollback(mark)  # a record that is not applied leaves no partial writes
        key = rec.key_str
        attempt = 1
        if isinstance(outcome, Retry):
            akey = (rec.topic, rec.partition, rec.offset)
            att = self._attempts.get(akey) or Tries(
                attempts=0, first_failure_ms=now, last_failure_ms=now
            )
            att["attempts"] += 1
            att["last_failure_ms"] = now
            self._attempts[akey] = att
            attempt = att["attempts"]
        decision = decide(
            outcome, attempt=attempt, policy=cfg.retry, ordered=cfg.ordered, keyed=key is not None
        )
        if isinstance(decision, Retry):
            batch.blocked[rec.tp] = (rec.offset, decision.delay_s or 0.0)
            batch.count("retry")
            return
        self._settle(rec, decision, batch, msg_id, now)

    def _settle(
        self,
        rec: Record,
        outcome: Ack | DeadLetter | Quarantine,
        batch: _Batch,
        msg_id: str | None,
        now: int,
    ) -> None:
        batch.next_offset[rec.tp] = rec.offset + 1
        att_info = (
            self._attempts.pop((rec.topic, rec.partition, rec.offset), None)
            if self._attempts
            else None
        )
        if isinstance(outcome, Ack):
            if msg_id is not None:
                batch.applied_ids.add(msg_id)
            batch.count("ack")
            return
        scope = self.config.dedupe_scope
        key = rec.key_str
        tries = att_info or Tries(attempts=1, first_failure_ms=now, last_failure_ms=now)
        quarantine = (
            isinstance(outcome, Quarantine) and self.quarantine is not None and key is not None
        )
        self.dead_letters.stage(
            batch.staged,
            FailureContext(
                record=rec,
                reason=outcome.reason,
                error=outcome.error,
                quarantined=quarantine,
                **tries,
            ),
        )
        if quarantine and self.quarantine is not None and key is not None:
            batch.staged.call(
                functools.partial(_quarantine, self.quarantine, scope, key, outcome.reason, rec.ref)
            )
            batch.quarantined.add(key)
            batch.count("quarantine")
        else:
            batch.count("dead_letter")

    def _claim_apart(self, scope: str, ids: Sequence[str | None], now: int) -> set[str]:
        """PLANTED BUG (``Hooks.dedupe_own_transaction``, tests only): the dedupe rows commit
        in a transaction of their own, before the effects' -- what seed 001 forbids."""
        with self.sessions.begin() as session:
            claimed = claim_ids(session.connection(), scope, filter(None, ids), now)
        if claimed:
            self.hooks.at(Window.DEDUPE_COMMITTED_ALONE)
        return claimed

    def _back_off(self, batch: _Batch, *, releasing: str | None) -> None:
        """Re-read the whole batch after a backoff (a release is simply tried again later)."""
        if releasing is not None:
            return
        batch.blocked.clear()
        for tp, offset in batch.first_offset.items():
            batch.blocked[tp] = (offset, self.config.retry.delay_for(1))
        self._schedule_retries(batch)

    # -- retries: pause the partition, keep polling ------------------------------------------
    def _schedule_retries(self, batch: _Batch) -> None:
        now = time.monotonic()
        for (topic, partition), (blocked_at, delay) in batch.blocked.items():
            try:
                if self.inflight is None:  # re-read the partition from the blocked record
                    self.consumer.seek(TopicPartition(topic, partition, blocked_at))
                self.consumer.pause([TopicPartition(topic, partition)])
            except Exception:  # noqa: BLE001 - a revoked partition: the new owner re-reads it
                log.info("could not pause %s[%s] (revoked?)", topic, partition)
                continue
            if self.inflight is not None:  # inflight: its records wait in memory, no re-read
                self.inflight.hold_back((topic, partition), blocked_at, batch.records)
            self._paused[(topic, partition)] = now + delay
        if self.metrics:
            self.metrics.paused_partitions.labels(self.config.group_id).set(len(self._paused))

    def _resume_due(self) -> None:
        if not self._paused:
            return
        now = time.monotonic()
        due = [tp for tp, until in self._paused.items() if until <= now]
        if due:
            if self.inflight is not None:  # held-back records first, then what is fetched next
                for tp in due:
                    self.inflight.release(tp)
            self.consumer.resume([TopicPartition(t, p) for t, p in due])
            for tp in due:
                del self._paused[tp]
            if self.metrics:
                self.metrics.paused_partitions.labels(self.config.group_id).set(len(self._paused))

    # -- quarantine release: executed here, by the owner of the key's partition --------------
    def _maybe_release(self) -> None:
        q = self.quarantine
        if q is None:
            return
        now = time.monotonic()
        if now < self._next_release_check:
            return
        self._next_release_check = now + self.config.release_check_s
        try:
            for key in q.pending_releases(self.config.dedupe_scope):
                records = list(q.take_for_release(self.config.dedupe_scope, key))
                if all(r.tp in self._assigned for r in records):
                    self.process(records, releasing=key)
        except (SQLAlchemyError, StoreError) as exc:  # a read: the next check retries
            self._store_failed("a release check", exc)


def _member_id(consumer: Any) -> str | None:
    """The client's group member id; ``""`` when it has none (librdkafka dropped it to re-join
    on its own: confluent-kafka answers None then), None when it cannot say (a closed client)."""
    try:
        member = consumer.memberid()
    except Exception:  # noqa: BLE001 - a closed client, or one without the call
        return None
    return member if isinstance(member, str) else ""
