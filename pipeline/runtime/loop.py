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
3. **Offset commit** of each partition's handled prefix, checking every partition's result. An
   offset is committed only when every earlier record of that partition is durable (pull:
   at-least-once) or deliberately given up (forward: at-most-once).
4. **After-commit effects** (the forward path's inject) -- only when the commit succeeded. On a
   commit error nothing is injected: a visible loss, never a double injection. Pipelined
   (``RuntimeConfig.pipelined_commit``, the gateway's inbox), the commit goes asynchronously
   and the effects wait for its answer while the next batches are handled
   (``awaiting_commit.py``).

:class:`ConsumerRuntime` runs the step and the batch transaction; each other concern has its own
module: ``fetch.py`` (taking records off the consumer), ``settle.py`` (step 1, per record),
``batch_commit.py`` (step 3), ``attempts.py`` (retry counts carried in the commit),
``pauses.py`` (retries and backoffs as paused partitions), ``quarantine_gate.py`` (quarantine
reads, refresh and releases), ``rebalance.py`` (assign / revoke / lost), ``fencing.py`` (fenced
by itself or by a second member) and ``config.py``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import TopicPartition
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import FencedError, StoreError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.kafka.clients import ClientFactory, new_consumer
from pipeline.kafka.logs import ClientLog
from pipeline.kafka.settings import consumer_config
from pipeline.record import Record
from pipeline.store import pg_pipeline
from pipeline.support.clock import now_ms

from .attempts import Attempts
from .awaiting_commit import AwaitingCommit
from .batch import Batch, KeepQuarantined, effect_failed
from .batch_commit import BatchCommit
from .batch_session import BatchSessions
from .collector import size_for_batches
from .commits import AsyncCommits
from .config import RuntimeConfig
from .dedupe import claim_ids, release_ids
from .fencing import fenced_by_itself
from .fetch import fetch, on_consume_error
from .inflight import Dispatcher
from .metrics import RuntimeMetrics
from .pauses import Pauses
from .ports import (
    WARM_UP_ID,
    DeadLetterSink,
    Handler,
    Prepares,
    QuarantinePort,
    ReadsAhead,
    Verifies,
    Warms,
)
from .quarantine_gate import QuarantineGate
from .rebalance import Rebalance
from .settle import Settler
from .staging import AckMode

log = logging.getLogger(__name__)


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
        # the handler's verify stage, run before a dedupe drop (R-ENV-3 order)
        self.verify = handler.verify if isinstance(handler, Verifies) else None
        # the handler's batch stage before the transaction (the gateway verifies signatures
        # of the whole batch on a thread pool there)
        self.prepare = handler.prepare if isinstance(handler, Prepares) else None
        # the handler's batch read inside the transaction (the gateway reads the tracked sends
        # of a batch's receipts in one statement)
        self.read_ahead = handler.read_ahead if isinstance(handler, ReadsAhead) else None
        self.sessions = sessions
        # the batch transactions, on a connection held across batches (``batch_session.py``)
        self.batch_sessions = BatchSessions(sessions)
        self.dead_letters = dead_letters
        self.quarantine = quarantine
        self.metrics = metrics
        # the client's log, to tell librdkafka's self-fencing after a session timeout from a
        # real second member with our group.instance.id (see step())
        self.client_log = ClientLog()
        self.async_commits = AsyncCommits(
            static_member=config.instance_id is not None,
            on_failure=self._async_commit_failed,
            one_in_flight=config.pipelined_commit,  # answers awaited: never a queue of commits
        )
        # Fault injection for crash tests (wired only by an entry point, never by default):
        # called after a successful commit, before the batch's after-commit effects.
        fault_after_commit = fault_after_commit or hooks.fault_after_commit
        # pipelined: at-most-once batches waiting for their commit's answer
        self.awaiting = (
            AwaitingCommit(fault_after_commit=fault_after_commit)
            if config.pipelined_commit
            else None
        )
        self._conf = consumer_config(
            config.bootstrap,
            config.group_id,
            offset_reset=config.offset_reset,
            instance_id=config.instance_id,
            **{
                "logger": self.client_log,
                "on_commit": self._on_commit,
                **dict(config.consumer_overrides),
            },
        )
        self._consumer_factory = consumer_factory
        self.consumer = consumer_factory(self._conf)
        self.hooks = hooks  # planted bugs for the chaos suite (pipeline/hooks.py); off by default
        self.attempts = Attempts()
        self.pauses = Pauses(config, inflight=inflight, metrics=metrics)
        self.gate = QuarantineGate(quarantine, config, store_failed=self._store_failed)
        self.settler = Settler(
            config,
            handler=handler,
            verify=self.verify,
            dead_letters=dead_letters,
            quarantine=quarantine,
            is_quarantined=self.gate.is_quarantined,
            attempts=self.attempts,
            metrics=metrics,
        )
        self.batch_commit = BatchCommit(
            config,
            async_commits=self.async_commits,
            attempts=self.attempts,
            pauses=self.pauses,
            inflight=inflight,
            metrics=metrics,
            fault_after_commit=fault_after_commit,
        )
        self.rebalance = Rebalance(
            config,
            consumer=lambda: self.consumer,
            async_commits=self.async_commits,
            awaiting=self.awaiting,
            attempts=self.attempts,
            pauses=self.pauses,
            gate=self.gate,
            inflight=inflight,
            metrics=metrics,
            process=self.process,
        )
        self._warm = False
        self.batches = 0
        self._record_counters: dict[str, Any] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def subscribe(self) -> None:
        self.warm_up()
        self.consumer.subscribe(
            list(self.config.topics),
            on_assign=self.rebalance.on_assign,
            on_revoke=self.rebalance.on_revoke,
            on_lost=self.rebalance.on_lost,
        )

    def warm_up(self) -> None:
        """Pay the store's first-use costs before the first batch, not inside it: the dedupe
        claim and the handler's own writes (:class:`Warms`) run once in a transaction that is
        rolled back, so SQLAlchemy compiles and caches them and the pool holds a connection."""
        if self._warm:
            return
        self._warm = True
        size_for_batches()  # a batch's objects die young (``collector.py``)
        session = self.sessions()
        try:
            session.begin()
            claim_ids(session.connection(), self.config.dedupe_scope, [WARM_UP_ID], 0)
            if isinstance(self.handler, Warms):
                self.handler.warm(session)
        except (SQLAlchemyError, StoreError) as exc:  # the first batch pays instead
            log.warning("store warm-up skipped (the first batch pays for it): %s", exc)
        finally:
            session.rollback()
            session.close()

    def run(self, stop: threading.Event) -> None:
        self.subscribe()
        try:
            while not stop.is_set():
                self.step()
            if self.inflight is not None:  # inflight: graceful stop -- finish or give up, commit
                self.rebalance.settle_inflight({*self.rebalance.assigned})
        finally:
            self.close()
            if self.inflight is not None:
                self.inflight.close()

    def close(self) -> None:
        self.batch_sessions.close()
        with contextlib.suppress(RuntimeError):  # already closed
            if self.awaiting:  # pipelined batches' commits, confirmed, then their effects
                self.awaiting.settle(self.consumer, self.async_commits)
            if self.async_commits.sent:  # the pull path's last async commits, confirmed
                self.async_commits.flush(self.consumer)
            self.consumer.close()

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka's ``on_commit`` (served by ``poll``/``consume`` on this thread)."""
        self.async_commits.on_commit(err, partitions)
        if self.awaiting is not None:
            self.awaiting.on_commit(err, partitions)

    def _async_commit_failed(self, error: str) -> None:
        if self.metrics:
            self.metrics.commit_failures.labels(self.config.group_id).inc()
        log.warning("asynchronous offset commit failed (redelivery is absorbed): %s", error)

    def _store_failed(self, what: str, exc: Exception) -> None:
        if self.metrics:
            self.metrics.store_failures.labels(self.config.group_id).inc()
        log.warning("%s failed (%s); retrying after a backoff", what, exc)

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> int:
        """Poll once and process what came back; returns the number of records seen.

        A static member fenced right after timing out its own session was fenced by itself
        (:mod:`pipeline.runtime.fencing`): it re-joins with a fresh client instead of stopping.
        Any other fencing is a second member with our id, and stops this one.
        """
        try:
            return self._step()
        except FencedError:
            if self.config.instance_id is None or not fenced_by_itself(
                self.client_log, self.rebalance.member_id, self.consumer
            ):
                raise
        self._rejoin()
        return 0

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
        lost = [TopicPartition(t, p) for t, p in self.rebalance.assigned]
        self.rebalance.on_lost(self.consumer, lost)
        self.close()
        # the dropped client's late commit results (a refused async commit, served while it
        # closed) belong to the fencing being handled now, not to the fresh client (the
        # ``paused-leader`` chaos scenario: a second "fenced" 0.15 s after the re-join stopped
        # the gateway)
        self.async_commits.reset()
        self.consumer = self._consumer_factory(self._conf)
        self.rebalance.member_id = None  # until the fresh client's first assignment
        self.subscribe()
        self.rebalance.count("rejoin")

    def _step(self) -> int:
        self.async_commits.retry(self.consumer)
        fenced = self.async_commits.fencing()
        if fenced is not None:
            cfg = self.config
            raise FencedError(
                f"group {cfg.group_id} member {cfg.instance_id or '(dynamic)'} was fenced "
                f"(an asynchronous offset commit was refused): {fenced}"
            )
        if self.gate.stale and not self.gate.refresh(
            self.consumer, self.rebalance.assigned, self.pauses.paused
        ):
            msg = self.consumer.poll(self.config.poll_timeout_s)  # heartbeats; all paused
            if msg is not None and msg.error() is not None:
                on_consume_error(self.consumer, self.config, msg.error(), msg)
            elif msg is not None:  # fetched before the pause: rewind, so it is not lost
                with contextlib.suppress(Exception):
                    self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
            return 0
        self.pauses.resume_due(self.consumer)
        self.gate.maybe_release(self.rebalance.assigned, self.process)
        room, wait = None, self.config.poll_timeout_s
        if self.inflight is not None:  # inflight: pause full partitions, bound held records,
            room = self.inflight.room(
                self.consumer, self.rebalance.assigned, self.pauses.paused.__contains__
            )
            wait = self.inflight.wait_s(wait)  # and wake up soon after a step ends
        if self.awaiting is not None:
            wait = self.awaiting.next_wait_s(wait)
        messages = fetch(self.consumer, self.config, self.inflight, room, wait)
        if self.awaiting is not None:  # answers served by that fetch: the next commit goes,
            self.async_commits.send_unsent(self.consumer)  # and what they confirmed runs
            self.awaiting.run_ready()
        records: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                records.append(Record.from_message(msg))
                continue
            on_consume_error(self.consumer, self.config, err, msg)
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

    def process(self, records: list[Record], *, releasing: str | None = None) -> None:
        cfg = self.config
        scope = cfg.dedupe_scope
        batch = Batch(records=records)
        head = cfg.dedupe_header
        ids: list[str | None] = (
            [rec.header_str(head) for rec in records] if head else [None] * len(records)
        )
        first = batch.first_offset
        for rec in records:
            if rec.tp not in first:
                first[rec.tp] = rec.offset
        if self.prepare is not None:
            self.prepare(records)  # the handler's batch stage, outside the transaction
        planted = False
        try:
            now = now_ms()
            apart = None
            if self.hooks.dedupe_own_transaction:  # PLANTED BUG (tests only, pipeline/hooks.py)
                apart = self._claim_apart(scope, ids, now)
            with self.batch_sessions.begin() as tx:
                if self.read_ahead is not None:  # before the claim: on PostgreSQL its read
                    self.read_ahead(tx, records)  # may go in the claim's round trip
                # the dedupe claim IS the lookup: one insert-or-ignore, no read transaction
                claimed = (
                    claim_ids(tx.connection(), scope, filter(None, ids), now)
                    if apart is None
                    else apart
                )
                self.settler.decide_all(records, ids, batch, claimed, now, releasing=releasing)
                if releasing is not None and batch.blocked:
                    raise KeepQuarantined  # still failing transiently: roll back, try later
                planted = (
                    self.hooks.commit_before_transaction
                    and releasing is None
                    and not batch.staged.empty()
                )
                if planted:  # PLANTED BUG (tests only): the offsets commit before the rows
                    if not self.batch_commit.commit(self.consumer, batch, sync=True):
                        raise KeepQuarantined  # roll back; the retries are scheduled
                    self.hooks.at(Window.COMMITTED_BEFORE_TRANSACTION)
                unused = claimed - batch.applied_ids
                if unused:  # dead-lettered, parked or retried: no dedupe row for them
                    release_ids(tx.connection(), scope, unused)
                batch.staged.flush(tx)
                if releasing is None and not (planted or batch.staged.writes()):
                    pg_pipeline.claims_only(tx.connection())  # PostgreSQL: no WAL wait
                if (
                    releasing is not None
                    and self.quarantine is not None
                    and releasing not in batch.quarantined  # failed again: stays quarantined
                ):
                    self.quarantine.complete_release(tx.session, scope, releasing)
        except KeepQuarantined:
            return
        except (SQLAlchemyError, StoreError) as exc:  # a read or the write: the batch backs off
            self._store_failed("the batch transaction", exc)
            self.pauses.back_off(self.consumer, batch, releasing=releasing)
            return
        if not self._commit(batch, committing=releasing is None and not planted):
            return
        self.pauses.schedule(self.consumer, batch)
        self.batches += 1
        if self.metrics:
            self._count(batch)

    def _commit(self, batch: Batch, *, committing: bool) -> bool:
        """Steps 3 and 4: the offset commit (unless the batch is a release, or the planted bug
        committed already) and the follow-ups; False when a synchronous commit failed."""
        if (
            committing
            and self.awaiting is not None
            and batch.staged.ack_mode() is AckMode.AT_MOST_ONCE
        ):  # pipelined: the effects wait for the commit's answer, the loop goes on
            self.batch_commit.send_awaiting(self.consumer, batch, self.awaiting)
            return True
        if committing and not self.batch_commit.commit(self.consumer, batch):
            return False
        batch.staged.run_effects(committed=True, on_error=effect_failed)
        return True

    def _count(self, batch: Batch) -> None:
        assert self.metrics is not None
        counters = self._record_counters
        for outcome, n in batch.counts.items():
            counter = counters.get(outcome)
            if counter is None:  # a labelled child per outcome, looked up once
                group = self.config.group_id
                counter = counters[outcome] = self.metrics.records.labels(group, outcome)
            counter.inc(n)

    def _claim_apart(self, scope: str, ids: Sequence[str | None], now: int) -> set[str]:
        """PLANTED BUG (``Hooks.dedupe_own_transaction``, tests only): the dedupe rows commit
        in a transaction of their own, before the effects' -- what R-ACK-8 forbids."""
        with self.sessions.begin() as session:
            claimed = claim_ids(session.connection(), scope, filter(None, ids), now)
        if claimed:
            self.hooks.at(Window.DEDUPE_COMMITTED_ALONE)
        return claimed
