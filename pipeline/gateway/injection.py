"""Forward-path injection, after the offset commit, one worker thread per local entity.

Per-recipient order is kept (one queue per gid). A busy target (``TARGET_BUSY``, retriable) is
retried with backoff until the message expires; success publishes ``INJECTED`` (through the
outbox) to the sender, a final failure publishes ``FAILED``.

A tracked brief (one whose sender waits for ``INJECTED``) goes through the inject journal
(:mod:`pipeline.host.inject_journal`): a row committed before its first inject attempt, closed in the
same transaction that stages its receipt right after the inject returns. A worker takes what is
already queued for its entity as one burst (at most ``burst`` briefs, no wait for more): the
burst's rows open in one transaction (the previous burst's close, when a backlog keeps it busy)
and close in one after its last inject. A crash before the row loses the inject *visibly* (the
sender's deadline turns the missing ``INJECTED`` into one ``FAILED``, which is true); a crash
while rows are open -- one burst per entity at most -- is reported at the next start as an ``INJECTED`` with stage ``uncertain``
(:meth:`InjectionQueue.report_uncertain`), never as a false "not injected".
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import failed_receipt, injected_body, receipts_envelope
from pipeline.errors import FleetError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.host import inject_journal as journal
from pipeline.host.outbound import Publisher
from pipeline.reasons import Delivery, Verification
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import with_retry
from pipeline.support import clock
from pipeline.tracing import TRACING

from .entities import LocalEntities
from .injectors import InjectUncertainError
from .journal_tx import JournalTx
from .metrics import GatewayMetrics
from .render import for_injector

log = logging.getLogger(__name__)

RECEIPT_TTL_S = 3600.0
TRACKED_KINDS = frozenset({Kind.SEND, Kind.ANSWER})
# briefs of one entity journaled together: their rows open in one transaction and close (with
# their receipts) in one, so a backlog costs one small transaction per burst, not per inject --
# and a crash mid-burst leaves up to this many rows open, each reported uncertain at restart
DEFAULT_BURST = 8


def past_inject_deadline(env: Envelope, now_ms: int | None = None) -> bool:
    """True once this host's clock is past ``expiresAt`` -- for a tracked brief, the inject
    deadline its sender signed. No skew allowance in the brief's favour (refuse when in doubt):
    the sender waits ``clock_skew_s`` beyond it before its own ``INJECT_TIMEOUT``."""
    now = clock.now_ms() if now_ms is None else now_ms
    return now > env.expires_at_ms


@dataclass(frozen=True, slots=True)
class _Receipt:
    envelope: Envelope
    host: str
    batchable: bool = False  # an INJECTED about an inject: it may travel in a RECEIPTS record


@dataclass(frozen=True, slots=True)
class _Job:
    gid: str
    envelope: Envelope
    reply_host: str | None
    queued_at: float

    @property
    def tracked(self) -> bool:
        """The sender waits for this brief's INJECTED: it is journaled and gets a receipt."""
        return self.reply_host is not None and self.envelope.kind in TRACKED_KINDS


@dataclass(frozen=True, slots=True)
class _Outcome:
    journal: str | None  # the state the journal row closes in; None: no row was opened
    receipt: _Receipt | None


class InjectionQueue:
    def __init__(
        self,
        *,
        entities: LocalEntities,
        sessions: sessionmaker[Session],
        publisher: Publisher,
        metrics: GatewayMetrics,
        busy_policy: BackoffPolicy | None = None,
        on_injected: Callable[[str, Envelope], None] | None = None,
        hooks: Hooks = NO_HOOKS,
        burst: int = DEFAULT_BURST,
        batches_receipts: Callable[[str], bool] | None = None,
    ) -> None:
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.burst = burst
        # True for a host whose gateway takes RECEIPTS (its signed presence says so): a burst's
        # INJECTEDs for one of its senders travel in one record; None or False: one each
        self.batches_receipts = batches_receipts
        self.entities = entities
        self.sessions = sessions
        self.publisher = publisher
        self.metrics = metrics
        self.busy = busy_policy or BackoffPolicy(base_s=0.05, max_s=2.0, max_attempts=10_000)
        self.on_injected = on_injected
        # called after a transaction staged receipts (the gateway wakes its relay with it)
        self.on_receipts: Callable[[], None] | None = None
        self.hooks = hooks
        self._queues: dict[str, queue.Queue[_Job | None]] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._tx = JournalTx(sessions)  # the journal's and receipts' transactions

    def submit(self, gid: str, envelope: Envelope, *, reply_host: str | None) -> None:
        with self._lock:
            q = self._queues.get(gid)
            if q is None:
                q = queue.Queue()
                self._queues[gid] = q
                t = threading.Thread(
                    target=self._work, args=(q,), name=f"inject-{gid}", daemon=True
                )
                t.start()
                self._threads.append(t)
        q.put(_Job(gid, envelope, reply_host, time.monotonic()))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for q in list(self._queues.values()):
            q.put(None)
        for t in self._threads:
            t.join(timeout)
        self._tx.close()

    def idle(self) -> bool:
        return all(q.unfinished_tasks == 0 for q in self._queues.values())

    def _work(self, q: queue.Queue[_Job | None]) -> None:
        nxt: list[_Job | None] = []  # the next burst, taken by the last close ...
        opened: set[str] | None = None  # ... which opened these rows (None: not opened yet)
        while True:
            jobs = nxt or self._take(q, q.get())
            nxt = []
            try:
                if opened is None:  # no close opened this burst's rows: its own transaction
                    opened = self._open_all(jobs)
                done: list[tuple[_Job, _Outcome]] = []
                for job in jobs:
                    if job is None:
                        break
                    try:
                        done.append((job, self._inject(job, opened=job.envelope.msg_id in opened)))
                    except Exception:  # one bad job must not kill the entity's worker
                        log.exception("injection worker error")  # its row stays open: uncertain
                opened = None
                if any(o.journal is not None or o.receipt is not None for _, o in done):
                    # not stopping, and more queued: open the next burst in this close
                    if jobs[-1] is not None and not q.empty():
                        with contextlib.suppress(queue.Empty):
                            nxt = self._take(q, q.get_nowait())
                    opened = self._record(done, nxt)
                    if not nxt:
                        opened = None
            except Exception:
                log.exception("injection worker error")
            finally:
                for _ in jobs:
                    q.task_done()
            if jobs[-1] is None:
                return

    def _take(self, q: queue.Queue[_Job | None], first: _Job | None) -> list[_Job | None]:
        """A burst: ``first`` and what is already queued behind it, at most ``burst`` jobs (no
        wait for more), ending early at the stop mark."""
        jobs = [first]
        # empty(): what is queued is taken without raising Empty at a burst's end (one worker
        # takes from this queue: nothing takes a job between the look and the take)
        while first is not None and len(jobs) < self.burst and not q.empty():
            try:
                job = q.get_nowait()
            except queue.Empty:
                break
            jobs.append(job)
            if job is None:
                break
        return jobs

    def _record(self, done: list[tuple[_Job, _Outcome]], then_open: list[_Job | None]) -> set[str]:
        """Close the burst's journal rows and stage their receipts: one transaction, right after
        the burst's last inject (a receipt is never more than this one transaction behind its
        inject); ``then_open``'s rows are opened in it too. Returns the msgIds opened."""

        moves = [(j.envelope.msg_id, o.journal) for j, o in done if o.journal is not None]
        staged = False
        batched = 0  # INJECTEDs staged inside RECEIPTS records (counted once committed)

        def once() -> set[str]:
            try:
                return attempt(sure=True)
            except SQLAlchemyError as exc:
                if not journal.not_all_open(exc):
                    raise
            return attempt(sure=False)  # a row was moved first: close the waiting way

        def attempt(*, sure: bool) -> set[str]:  # a whole transaction: a retry applies nothing
            nonlocal staged, batched  # twice
            staged = False
            with self._tx.begin() as tx:
                # nothing to open after the receipts: on PostgreSQL they may carry the COMMIT
                last = not any(j is not None and j.tracked for j in then_open)
                # ... and then the close too, sure that every row is still open: the statement
                # fails, and nothing commits, if one was not (a restart's report, a twin's)
                held = sure and last and isinstance(tx, Connection)
                ahead = journal.close_with_commit(tx, moves) if held else None
                if ahead is not None:
                    moved = iter([True] * len(moves))
                else:
                    moved = iter(journal.close_many(tx, moves))
                kept: list[_Receipt] = []
                for job, outcome in done:
                    if outcome.journal is not None and not next(moved):
                        # a restart's report (a twin's) moved the row first: its outcome stands
                        log.warning("journal row of %s was not open any more", job.envelope.msg_id)
                    elif outcome.receipt is not None:
                        receipt = outcome.receipt
                        if TRACING.on:  # fleet.receipt.stage, under the brief's fleet.inject
                            TRACING.receipt(job.envelope, receipt.envelope)
                        kept.append(receipt)
                receipts, batched = self._batched(kept)
                if isinstance(tx, Connection):  # a sender's receipts: one write (its branch)
                    before = () if ahead is None else (ahead,)
                    self.publisher.stage_many(tx, receipts, commit=last, before=before)
                else:
                    for envelope, host in receipts:
                        self.publisher.stage(tx, envelope, to_host=host)
                staged = bool(receipts)
                if staged:
                    self._tx.notify(tx)
                return self._open_in(tx, then_open)

        # a store hiccup must not leave an injected brief without its receipt until a restart
        opened = with_retry(once, what="inject receipt")
        if batched:
            self.metrics.receipts_batched.inc(batched)
        if staged and self.on_receipts is not None:  # no Session: no after_commit wake
            self._tx.hand_over()  # its rows, committed: the relay ships them as they are
            self.on_receipts()
        return opened

    def _batched(self, receipts: list[_Receipt]) -> tuple[list[tuple[Envelope, str]], int]:
        """The burst's receipts as ``(envelope, host)`` to stage, in order; the ``INJECTED``s
        about injects for one sender whose host takes ``RECEIPTS`` as one ``RECEIPTS`` record,
        where the first of them was (docs/gateway.md, "Receipts"). And how many went inside."""
        takes = self.batches_receipts
        batched: dict[tuple[str, str], list[Envelope]] = {}
        if takes is not None:
            for r in receipts:
                if r.batchable:
                    batched.setdefault((r.envelope.to, r.host), []).append(r.envelope)
            batched = {k: g for k, g in batched.items() if len(g) > 1 and takes(k[1])}
        out: list[tuple[Envelope, str]] = []
        for r in receipts:
            group = batched.get((r.envelope.to, r.host)) if r.batchable else None
            if group is None:
                out.append((r.envelope, r.host))
            elif group[0] is r.envelope:
                batch = receipts_envelope(
                    group, sender=self.publisher.gateway_id, ttl_s=RECEIPT_TTL_S
                )
                out.append((batch, r.host))
        return out, sum(len(g) for g in batched.values())

    def _open_all(self, jobs: list[_Job | None]) -> set[str]:
        """Commit the burst's journal rows before its first inject; returns the msgIds opened
        (a tracked brief missing from it was journaled before: it is not injected again)."""
        if not any(j is not None and j.tracked for j in jobs):
            return set()

        def once() -> set[str]:
            with self._tx.open_now() as tx:
                return self._open_in(tx, jobs)

        return with_retry(once, what="inject journal")

    @staticmethod
    def _open_in(session: Session | Connection, jobs: list[_Job | None]) -> set[str]:
        entries = [
            journal.Entry(
                j.envelope.msg_id, j.gid, j.envelope.sender, j.reply_host, j.envelope.trace_id
            )
            for j in jobs
            if j is not None and j.tracked and j.reply_host is not None
        ]
        return journal.open_many(session, entries)

    def _inject(self, job: _Job, *, opened: bool = False) -> _Outcome:
        """Inject one job; ``opened``: its journal row is committed (tracked briefs)."""
        env = job.envelope
        journaled = opened
        if job.tracked and not journaled:
            log.error("brief %s to %s is already in the inject journal: not injected again",
                      env.msg_id, job.gid)  # fmt: skip
            return _Outcome(None, None)

        def closing(state: str, receipt: _Receipt | None) -> _Outcome:
            if TRACING.on:  # fleet.inject, with the journal's outcome
                TRACING.injected(env, job.gid, state, job.queued_at)
            return _Outcome(state if journaled else None, receipt)

        entity = self.entities.get(job.gid)
        injector = entity.injector if entity is not None else None
        if injector is None:
            why = f"{job.gid} has no injector configured"
            return closing(journal.FAILED, self._failed(job, Delivery.NO_INJECTOR, why))
        body = for_injector(env, job.gid)  # a control kind lands as a sentence, not raw bytes
        attempt = 0

        while True:
            if self._stop.is_set():
                # shutting down, this attempt never made: the sender's deadline reports it
                return closing(journal.DROPPED, None)
            if past_inject_deadline(env):
                if env.kind in TRACKED_KINDS:  # expiresAt is the sender's inject deadline
                    self.metrics.inject_deadline_passed.labels("queue").inc()
                    failed = self._failed(
                        job, Delivery.INJECT_DEADLINE_PASSED, "inject deadline passed in the queue"
                    )
                    return closing(journal.FAILED, failed)
                why = "expired while the target stayed busy"
                return closing(journal.FAILED, self._failed(job, Verification.EXPIRED, why))
            attempt += 1
            try:
                injector.inject(
                    gid=job.gid,
                    msg_id=env.msg_id,
                    kind=env.kind.value,
                    sender=env.sender,
                    body=body,
                    trace_id=env.trace_id,
                )
            except InjectUncertainError as exc:  # handed over whole, then no answer
                log.error("inject of %s into %s is uncertain: %s", env.msg_id, job.gid, exc)
                return closing(journal.UNCERTAIN, self._uncertain(job))
            except FleetError as exc:
                if exc.retriable:
                    time.sleep(self.busy.delay_for(min(attempt, 6)))
                    continue
                return closing(journal.FAILED, self._failed(job, exc.reason, str(exc)))
            except Exception:  # an injector bug: the inject may or may not have landed
                log.exception("injector of %s raised on %s", job.gid, env.msg_id)
                return closing(journal.UNCERTAIN, self._uncertain(job))
            self.hooks.at(Window.INJECTED_NOT_RECORDED)
            self.metrics.queue_to_inject_seconds.observe(time.monotonic() - job.queued_at)
            if self.on_injected is not None:
                self.on_injected(job.gid, env)
            injected = injected_body(env.msg_id, job.gid)
            return closing(journal.INJECTED, self._injected(job, injected, batchable=True))

    def report_uncertain(self, limit: int = 500) -> int:
        """At start, before the inbox runs: every journal row still open is a brief this host
        decided to inject and died before recording. Each becomes ``uncertain`` and, in the same
        transaction, one ``INJECTED`` with stage ``uncertain`` for its sender ("may have been
        injected"). Returns how many were reported."""
        reported = 0
        while True:
            with self.sessions.begin() as s:
                rows = journal.open_entries(s, limit)
                for r in rows:
                    if not journal.close_entry(s, r.msg_id, journal.UNCERTAIN):
                        continue
                    notice = Envelope.new(
                        kind=Kind.INJECTED,
                        sender=self.publisher.gateway_id,
                        to=r.sender,
                        body=injected_body(r.msg_id, r.gid, stage=journal.STAGE_UNCERTAIN),
                        ttl_s=RECEIPT_TTL_S,
                        trace_id=r.trace_id,
                    )
                    self.publisher.stage(s, notice, to_host=r.reply_host)
                    reported += 1
                    log.warning(
                        "UNCERTAIN INJECT: brief %s from %s to %s was being injected when this "
                        "gateway died; its sender is told it may have been injected",
                        r.msg_id, r.sender, r.gid,
                    )  # fmt: skip
            if len(rows) < limit:
                break
        if reported:
            self.metrics.inject_uncertain.labels("restart").inc(reported)
        return reported

    def _uncertain(self, job: _Job) -> _Receipt | None:
        """The ``INJECTED`` with stage ``uncertain`` for a brief the injector may have landed."""
        self.metrics.inject_uncertain.labels("raised").inc()
        body = injected_body(job.envelope.msg_id, job.gid, stage=journal.STAGE_UNCERTAIN)
        return self._injected(job, body)

    def _injected(self, job: _Job, body: bytes, *, batchable: bool = False) -> _Receipt | None:
        """The ``INJECTED`` for a tracked brief's sender (None: nobody waits for one);
        ``batchable``: about an inject (not an uncertain one), it may travel in a RECEIPTS."""
        env = job.envelope
        if job.reply_host is None or not job.tracked:
            return None
        receipt = Envelope.new(
            kind=Kind.INJECTED,
            sender=self.publisher.gateway_id,
            to=env.sender,
            body=body,
            ttl_s=RECEIPT_TTL_S,
            trace_id=env.trace_id,
        )
        return _Receipt(receipt, job.reply_host, batchable)

    def _failed(self, job: _Job, reason: str, error: str) -> _Receipt | None:
        """The ``FAILED`` for a tracked brief's sender (None: nobody waits for one); its msgId
        is the one every path uses, so the sender's dedupe and unique held row keep one."""
        env = job.envelope
        log.warning("inject of %s into %s failed: %s %s", env.msg_id, job.gid, reason, error)
        if job.reply_host is None or not job.tracked:
            return None
        receipt = failed_receipt(
            about=env.msg_id,
            recipient=job.gid,
            sender=self.publisher.gateway_id,
            to=env.sender,
            reason=reason,
            error=error,
            stage="inject",
            ttl_s=RECEIPT_TTL_S,
            trace_id=env.trace_id,
        )
        return _Receipt(receipt, job.reply_host)
