"""The relay: ship committed outbox rows to Kafka, ack only what the broker confirmed.

R-OUT-2: its own process and supervision; loop drain -> publish in ``(BranchKey, Lsn)`` order
-> ack only what the broker accepted; retry with backoff inside; never propagate a broker error
into run execution (writers never see the relay at all).

Per batch: read each active branch's next unsent rows, publish them in ``(tenant, branch_key,
lsn)`` order with the idempotent ``acks=all`` producer, wait for every delivery report, then ack
-- per branch -- only the unbroken run of confirmed rows above its watermark, by raising the
watermark (:mod:`.acker`; no row is rewritten). A branch whose row failed is resent from that
row on the next pass (a failed record may still have been written: the consumer's fold absorbs
the copy). The producer never times a record out, so a broker outage delays a branch but cannot
reorder it (docs/outbox.md, invariant 4). ``run_forever`` ships rows a writer in this process
handed over at its commit without reading them (:mod:`.feed`), acks a clean pass's rows with
the next ack (:mod:`.ack_later`) and, under load, spaces its passes (:mod:`.pacing`).

A *permanent* produce error (``pipeline.kafka.produce_errors``: too large, invalid record, not
authorised ...) is not retried: the row becomes terminal ``FAILED`` with its reason and its
branch stops loudly behind it (:mod:`.terminal`, docs/outbox.md). A row refused synchronously
by ``produce()`` holds back the rest of its branch at once, so no later row of it is published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import BrokerError, StoreError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.kafka.clients import ClientFactory, new_producer
from pipeline.kafka.settings import producer_config
from pipeline.store import readonly
from pipeline.support.retrying import Backoff

from .ack_later import AckLater
from .acker import Acker
from .batch import HELD_BACK, Batch
from .feed import Feed, Known
from .fetch import FetchSql, OutboxReader
from .headers import FoldHeaders
from .idle import IdleWait
from .limits import DEFAULT_MAX_RECORD_BYTES
from .metrics import OutboxMetrics, PublishFailure, classify
from .pacing import Pacing
from .produce import produce_batch
from .refused import fail_refused
from .settle import settle
from .status import backlog
from .supervision import last_pass, report_failure
from .terminal import FailedRow, TerminalSink, stopped_branches
from .wake import feed_from, stop_feeding

log = logging.getLogger(__name__)


class Relay:
    """Drains the outbox to Kafka. Run one relay per tenant (or one for all tenants)."""

    def __init__(
        self,
        *,
        engine: Engine,
        bootstrap: str,
        tenant: str | None = None,
        batch_size: int = 500,
        pipeline_depth: int = 2,
        registry: CollectorRegistry | None = None,
        delivery_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 10.0,
        idle_wait_s: float = 0.05,
        ack_interval_s: float = 0.05,
        pass_spacing_s: float = 0.006,
        final_pass_s: float = 2.0,
        metrics_interval_s: float = 1.0,
        producer_overrides: Mapping[str, Any] | None = None,
        producer_factory: ClientFactory = new_producer,
        terminal_sink: TerminalSink | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.engine = engine
        self.hooks = hooks  # planted bugs for the chaos suite (pipeline/hooks.py); off by default
        self._reader = readonly(engine)
        self._was_busy = True
        self.tenant = tenant
        self.batch_size = batch_size
        self.pipeline_depth = max(1, pipeline_depth)
        self.metrics = OutboxMetrics(registry if registry is not None else CollectorRegistry())
        self.delivery_timeout_s = delivery_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.idle_wait_s = idle_wait_s
        self.final_pass_s = final_pass_s  # a stop's last pass (supervision.py)
        self.metrics_interval_s = metrics_interval_s
        self._conf = producer_config(
            bootstrap,
            **{
                # Never time a record out. A timed-out record resent later lands *after* the
                # later records of its branch that the broker took in the meantime: with
                # per-record timeouts, a broker back between two of them reorders the branch
                # (the ``broker-down`` chaos scenario: lsn 11-14 held after 15-59). With no timeout the
                # idempotent producer delivers a partition's records in order, however long the
                # outage; delivery_timeout_s only says when to report them (_settle).
                "message.timeout.ms": 0,
                # the client refuses what the topic would (at produce(), synchronously), so a
                # too-large row stops its branch before any later row of it is sent
                "message.max.bytes": DEFAULT_MAX_RECORD_BYTES + 12,
                "error_cb": self._on_client_error,
                **dict(producer_overrides or {}),
            },
        )
        self._factory = producer_factory
        self._producer: Any = None
        self._fatal = False
        self._stop: threading.Event | None = None
        # woken by wake() (rows just committed here); else others' commits seen, or looked for
        self.idle = IdleWait(engine, poll_s=idle_wait_s, max_idle_s=metrics_interval_s, watch=True)
        self._next_metrics = 0.0
        self._store: ThreadPoolExecutor | None = None
        self._acker = Acker(engine, tenant=tenant)
        self._later = AckLater(interval_s=ack_interval_s, max_rows=batch_size)  # run_forever's
        self._pacing = Pacing(pass_spacing_s)  # run_forever's (pacing.py)
        self._feed: Feed | None = Feed()  # run_forever's
        self._known = Known()
        self._read_next = True  # the next pass reads the store (a wake nothing was fed for)
        self._read_by = 0.0  # monotonic: a pass reads the store by then, fed or not
        self._terminal_sink = terminal_sink
        self._stopped: set[tuple[str, str]] | None = None  # loaded on the first fetch
        self._read = OutboxReader(
            self._reader, FetchSql(engine.dialect.paramstyle, tenant=tenant, limit=batch_size)
        )
        self._fold_headers = FoldHeaders()
        self._drained_clean = False  # the last pass read every unsent row and shipped them all
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error

    # -- passes ----------------------------------------------------------------------------
    def run_once(self) -> int:
        """Drain one batch, publish it, ack what the broker confirmed; return rows acked.

        Raises :class:`BrokerError` (retriable) after acking the confirmed part when any delivery
        failed, and :class:`StoreError` when a database call failed.
        """
        return self._pump(max_batches=1)

    def drain(self) -> int:
        """Ship until no pending row is left, keeping ``pipeline_depth`` batches in flight.

        Same failure contract as :meth:`run_once`; after a failure no new batch is started, the
        ones in flight are settled, and the error is raised.
        """
        return self._pump(max_batches=None)

    def run_forever(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set, backing off on any failure; never raises broker errors."""
        self._stop = stop
        # the producer now: it connects while the outbox is empty, not at the first row
        self._ensure_producer()
        backoff = Backoff(initial_s=self.backoff_initial_s, max_s=self.backoff_max_s, jitter=0.2)
        if self._feed is not None:
            feed_from(self.engine, self._feed)
        # its own supervisor: a failure is logged and waited out (longer while passes fail)
        failures = 0
        try:
            while not stop.is_set():
                started = self._pacing.hold(stop)
                try:
                    acked = self._one_pass()
                except Exception as exc:  # noqa: BLE001 - its own supervisor: logged, waited out
                    failures += 1
                    delay = backoff.delay(failures)
                    report_failure(exc, failures, delay)
                    if stop.wait(delay):
                        return  # a stop ended the wait (passes are failing: no last pass)
                    continue
                failures = 0
                self._pacing.shipped(started, acked)
                # A pass that read every unsent row of its branches waits: a commit since ends the
                # wait at once (its wake; NOTIFY; data_version), the spacing slept out first (pacing).
                if acked == 0 or self._drained_clean:
                    self._pacing.hold(stop, until=self._later.due)
                    if not self.idle.wait(stop, until=self._later.due):
                        self._read_next = True  # not a wake: another process may have committed
            last_pass(self._pump_until, self.final_pass_s)  # what is committed by now goes out
        finally:
            self.close()

    def _pump_until(self, stop: threading.Event) -> int:
        self._stop = stop
        return self._pump(max_batches=None)

    def _one_pass(self) -> int:
        """One pass of :meth:`run_forever`: the rows handed over, else a read of the store."""
        self.idle.clear()  # a wake() from here on ends the idle wait below at once
        try:
            fed = self._fed()
            if fed is not None and not fed and not self._later.is_due():
                return 0  # all of it sent already
            return self._pump(max_batches=None, defer=True, fed=fed)
        except BaseException:
            self._known.forget()  # the store says what is sent: read it next
            self._read_next = True
            raise

    def wake(self) -> None:
        """Rows were committed just now: end the idle wait (a writer in this process calls it).
        Unless they were handed over (:mod:`.wake`), the next pass reads the store."""
        if self._feed is None or not self._feed.woken_by_put():
            self._read_next = True
        self.idle.wake()

    def _fed(self) -> list[Any] | None:
        """The rows handed over to ship from memory, or ``None``: this pass reads the store."""
        feed = self._feed
        if feed is None:
            return None
        rows = feed.take()
        now = time.monotonic()
        if rows is None or self._read_next or now >= self._read_by or self._stopped is None:
            self._read_next = False
            self._read_by = now + self.idle_wait_s  # rows no wake announced: within a poll
            return None
        return self._known.next_rows(rows, self._stopped)

    def close(self, timeout: float = 2.0) -> None:
        # Unconfirmed records are simply not acked: the next relay resends them.
        if self._feed is not None:
            stop_feeding(self.engine, self._feed)
            self._known.forget()  # a restarted run_forever reads first (rows kept may be lost)
        if self._producer is not None:
            self._producer.flush(timeout)
            self._producer = None
        if self._later.rows:  # confirmed, not yet acked: a clean stop marks them sent
            try:
                self._ack_kept()
            except StoreError as exc:
                log.warning("outbox relay: %s at stop; those rows will be sent again", exc)
        if self._store is not None:
            self._store.shutdown(wait=True)
            self._store = None
        self._acker.close()
        self._read.close()
        self.idle.close()

    # -- steps -------------------------------------------------------------------------------
    def _pump(
        self, *, max_batches: int | None, defer: bool = False, fed: list[Any] | None = None
    ) -> int:
        # Pipelined: this thread produces batch k, then reads k+1 while the broker works on k;
        # the store thread acks k-1; up to ``pipeline_depth`` batches are with the broker. The
        # read stays here: sqlite3 hands the GIL over at every row it steps, so a reader on
        # another thread waits for this one at each hand-off (measured: 5x slower).
        self._rebuild_if_fatal()
        kept = self._later
        if kept.rows and (fed is None or not defer or kept.is_due() or kept.full()):
            self._ack_kept()  # before a read: it then starts at the watermark
        store = self._store_thread()
        window: deque[Batch] = deque()
        acks: deque[tuple[Future[None], list[Any], list[Any]]] = deque()
        broken: set[tuple[str, str]] = set()  # branches with a failed row: no more acks now
        started = acked = failed = 0
        deferred = 0
        rows: list[Any] | None = self._fetch(first=True) if fed is None else fed
        while rows is not None or window:
            if rows is not None and len(window) < self.pipeline_depth:
                if not rows or broken or (self._stop is not None and self._stop.is_set()):
                    rows = None
                    continue
                started += 1
                if self.hooks.ack_before_delivery_report:  # PLANTED BUG (tests only)
                    self._ack(kept.take() + rows)
                    self.hooks.at(Window.ACKED_BEFORE_REPORT)
                window.append(self._produce(rows))
                more = (
                    fed is None
                    and len(rows) == self.batch_size
                    and (max_batches is None or started < max_batches)
                )
                rows = self._fetch(first=False) if more else None
                continue
            batch = window.popleft()
            self._settle(batch)
            if batch.done:
                self.hooks.at(Window.REPORTED_NOT_MARKED)  # a crash point (tests only)
            confirmed, errors = self._confirmed(batch, broken)
            if defer and self._feed is not None:
                self._known.confirmed(confirmed)  # the rows a feed may continue (feed.py)
            # acks run in order on the store thread; the guard in _ACK keeps each branch's
            # "sent" a prefix even if an earlier ack failed
            refused = batch.refused() if errors else []
            errors = [e for e in errors if e is not HELD_BACK]
            last = rows is None and not window
            keep = defer and fed is not None and last and not errors and not broken and not acks
            confirmed, kept_now = self._keep_or_take(confirmed, keep=keep)
            deferred += kept_now
            if confirmed or errors:  # (a kept batch has nothing to ack or observe now)
                acks.append(
                    (self._ack_in_order(store, acks, confirmed, last=last), confirmed, errors)
                )
            if refused:  # after this batch's acks, so each refused row heads its branch
                acks.append((store.submit(self._fail, refused), [], []))
            failed += len(errors) - len(refused)
            # at most pipeline_depth batches confirmed but not yet marked sent: with as many in
            # flight, a kill -9 replays at most 2 x pipeline_depth batches (the fold drops them)
            acked += self._collect(acks, wait=False, keep=self.pipeline_depth)
            if started > 1:  # a long drain: its gauges move on the interval meanwhile
                self._observe_backlog()
        acked += self._collect(acks, wait=True)
        shipped = acked + deferred
        self._after_pass(shipped, fed=fed is not None, failed=failed > 0, broken=bool(broken))
        if failed:
            raise BrokerError(
                f"outbox relay: {failed} deliveries failed; {acked} acked, "
                "the rest will be resent from each branch's lowest unacknowledged lsn",
                context={"failed": failed, "acked": acked},
            )
        return shipped

    def _after_pass(self, shipped: int, *, fed: bool, failed: bool, broken: bool) -> None:
        drained = fed or self._read.drained()
        self._read_next = self._read_next or not drained  # rows left behind: read them next
        self._drained_clean = not failed and not broken and drained
        # A pass that read every unsent row and shipped it all leaves no backlog (but rows
        # committed since): the gauges go to 0 with no query. Otherwise they are refreshed from
        # the store at once when the relay turns idle, else on the interval (an idle relay
        # passes every idle_wait_s and must not count the backlog each time).
        if self._drained_clean and not self._stopped:
            self.metrics.backlog_rows.set(0)
            self.metrics.oldest_unsent_age_seconds.set(0.0)
        else:
            self._observe_backlog(force=shipped == 0 and self._was_busy)
        self._was_busy = shipped > 0
        if shipped == 0 and not failed:
            self.metrics.relay_lag_seconds.set(0)

    def _rebuild_if_fatal(self) -> None:
        if self._fatal and self._producer is not None:
            # an idempotent producer in a fatal state must be rebuilt (its unconfirmed rows are
            # still pending, so they simply go out again)
            self._producer.flush(0)
            self._producer, self._fatal = None, False

    def _keep_or_take(self, confirmed: list[Any], *, keep: bool) -> tuple[list[Any], int]:
        """``(rows to ack now, rows kept)``: with ``keep`` a clean pass's last batch is acked
        later (ack_later.py), unless that fills the keep; the rows to ack now come behind
        every kept row (acked before them)."""
        kept = self._later
        if keep:
            kept.keep(confirmed)
            if not kept.full():
                return [], len(confirmed)
            confirmed = []
        return (kept.take() + confirmed if kept.rows else confirmed), 0

    def _ack_kept(self) -> None:
        """Ack the rows :class:`AckLater` kept, now (a failure forgets them: sent again)."""
        rows = self._later.take()
        self._ack(rows)
        self._observe(rows, [])

    def _collect(
        self,
        acks: deque[tuple[Future[None], list[Any], list[Any]]],
        *,
        wait: bool,
        keep: int | None = None,
    ) -> int:
        """Observe finished acks in order, waiting for all (``wait``) or until at most ``keep``
        are outstanding; a failed ack raises its StoreError (its rows are resent)."""
        done = 0
        while acks and (wait or acks[0][0].done() or (keep is not None and len(acks) > keep)):
            future, confirmed, errors = acks.popleft()
            future.result()
            self._observe(confirmed, errors)
            done += len(confirmed)
        return done

    def _store_thread(self) -> ThreadPoolExecutor:
        if self._store is None:
            self._store = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-store")
        return self._store

    def _fetch(self, *, first: bool) -> list[Any]:
        # The first fetch of a pass lists the branches with unsent rows (their watermarks);
        # later ones continue each branch after the last lsn handed out (fetch.py). On
        # PostgreSQL a branch whose rows commit after the listing is picked up by the next pass.
        try:
            if self._stopped is None:
                self._stopped = stopped_branches(self._reader, tenant=self.tenant)
                self.metrics.stopped_branches.set(len(self._stopped))
            # the DB-API cursor (fetch.py); a stopped branch publishes nothing after its FAILED row
            # (a snapshot: the store thread may stop a branch meanwhile)
            rows = self._read.read(first=first, stopped=self._stopped, ahead=self._later.marks())
        except (SQLAlchemyError, self._dbapi_error) as exc:
            raise StoreError(f"outbox relay: cannot read the outbox: {exc}") from exc
        # id order is lsn order within each branch (inv. 2), which is all the producer needs
        return rows

    def _produce(self, rows: list[Any]) -> Batch:
        stopped = self._stopped if self._stopped is not None else set()
        batch = produce_batch(self._ensure_producer(), rows, stopped, self._fold_headers)
        if stopped:
            self._stopped = stopped  # a row refused at once for good stopped its branch
        return batch

    def _settle(self, batch: Batch) -> None:
        """Wait for every report of ``batch`` (:func:`.settle.settle`)."""
        settle(
            batch,
            self._producer,
            timeout_s=self.delivery_timeout_s,
            metrics=self.metrics,
            observe_backlog=self._observe_backlog,
            stop=self._stop,
        )

    @staticmethod
    def _confirmed(batch: Batch, broken: set[tuple[str, str]]) -> tuple[list[Any], list[Any]]:
        return batch.confirmed(broken)

    def _ack(self, rows: list[Any]) -> None:
        self._acker.ack(rows)

    def _ack_in_order(
        self,
        store: ThreadPoolExecutor,
        acks: deque[tuple[Future[None], list[Any], list[Any]]],
        rows: list[Any],
        *,
        last: bool,
    ) -> Future[None]:
        """Ack ``rows`` after every earlier ack: on the store thread while batches follow (the
        ack overlaps their produce), here when this is the pass's last batch and no earlier ack
        is outstanding -- there is nothing to overlap, and a hand-off to the store thread and
        back costs more CPU than a small batch's ack itself."""
        if not last or any(not future.done() for future, _, _ in acks):
            return store.submit(self._ack, rows)
        done: Future[None] = Future()
        try:
            self._ack(rows)
        except Exception as exc:  # noqa: BLE001 - raised by _collect, as the store thread's
            done.set_exception(exc)
        else:
            done.set_result(None)
        return done

    def _fail(self, rows: list[FailedRow]) -> None:
        stopped = self._stopped if self._stopped is not None else set()
        try:
            fail_refused(self.engine, rows, self._terminal_sink, stopped, self.metrics)
        finally:
            self._stopped = stopped
            self.metrics.stopped_branches.set(len(stopped))

    # -- producer and metrics ----------------------------------------------------------------
    def _ensure_producer(self) -> Any:
        if self._producer is None:
            self._producer = self._factory(dict(self._conf))
        return self._producer

    def _on_client_error(self, err: Any) -> None:
        if err.fatal():
            self._fatal = True
        log.debug("outbox relay: client error %s", err)

    def _observe(self, confirmed: list[Any], errors: list[Any]) -> None:
        for err in errors:
            reason = classify(err)
            self.metrics.publish_error(reason)
            if reason is PublishFailure.FATAL:
                self._fatal = True
        if confirmed:
            self.metrics.published_total.inc(len(confirmed))
            oldest = confirmed[0][8]  # id order: the lowest id is the oldest row (status.py)
            lag = max(0.0, time.time() - oldest)
            self.metrics.relay_lag_seconds.set(lag)
            self.metrics.batch_lag_seconds.observe(lag)

    def _observe_backlog(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_metrics:
            return
        self._next_metrics = now + self.metrics_interval_s
        try:
            count, oldest = backlog(self._reader, tenant=self.tenant)
        except SQLAlchemyError as exc:
            log.warning("outbox relay: cannot read the backlog: %s", exc)
            return
        self.metrics.backlog_rows.set(count)
        self.metrics.oldest_unsent_age_seconds.set(
            0.0 if oldest is None else max(0.0, time.time() - oldest)
        )
