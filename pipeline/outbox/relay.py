"""The relay: ship committed outbox rows to Kafka, ack only what the broker confirmed.

R-OUT-2: its own process and supervision; loop drain -> publish in
``(BranchKey, Lsn)`` order -> ack only what the broker accepted; retry with backoff inside;
never propagate a broker error into run execution (writers never see the relay at all).

Per batch: read each active branch's next unsent rows, publish them in ``(tenant, branch_key,
lsn)`` order with the idempotent ``acks=all`` producer, wait for every delivery report, then ack
-- per branch -- only the unbroken run of confirmed rows above its watermark, by raising the
watermark (:mod:`.acker`; no row is rewritten). A branch whose row failed is resent from that
row on the next pass (a failed record may still have been written:
the consumer's fold absorbs the copy). The producer never times a record out, so a broker outage
delays a branch but cannot reorder it (docs/outbox.md, invariant 4).

A *permanent* produce error (``pipeline.kafka.produce_errors``: too large, invalid record, not
authorised ...) is not retried: the row becomes terminal ``FAILED`` with its reason and its branch
stops loudly behind it (:mod:`.terminal`, docs/outbox.md). A row refused synchronously by
``produce()`` holds back the rest of its branch at once, so no later row of it is published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import BrokerError, FleetError, StoreError
from pipeline.hooks import NO_HOOKS, Hooks, Window
from pipeline.kafka.clients import ClientFactory, new_producer
from pipeline.kafka.produce_errors import permanent_reason
from pipeline.kafka.settings import producer_config
from pipeline.record_headers import unpack_headers
from pipeline.store import readonly
from pipeline.support.retrying import Backoff, retry_call

from .acker import Acker
from .batch import HELD_BACK, Batch
from .fetch import FetchSql, OutboxReader
from .headers import TRACING, FoldHeaders
from .idle import IdleWait
from .limits import DEFAULT_MAX_RECORD_BYTES
from .metrics import OutboxMetrics, PublishFailure, classify
from .status import backlog
from .terminal import FailedRow, TerminalSink, fail_row, stopped_branches

log = logging.getLogger(__name__)


def _report_failure(exc: Exception, _attempt: int, delay: float) -> None:
    if isinstance(exc, FleetError):
        log.warning("outbox relay: %s; retrying in %.1fs", exc, delay)
    else:
        log.error("outbox relay: unexpected error; retrying in %.1fs", delay, exc_info=exc)


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
        # woken by wake() (rows just committed here); else a cheap look for others' commits
        self._idle = IdleWait(engine, poll_s=idle_wait_s, max_idle_s=metrics_interval_s)
        self._next_metrics = 0.0
        self._store: ThreadPoolExecutor | None = None
        self._acker = Acker(engine, tenant=tenant)
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
        # Create the producer now: librdkafka connects and fetches metadata in the background
        # while the outbox is empty, so the first real row does not pay for it.
        self._ensure_producer()
        backoff = Backoff(initial_s=self.backoff_initial_s, max_s=self.backoff_max_s, jitter=0.2)

        def one_pass() -> int:
            self._idle.clear()  # a wake() from here on ends the idle wait below at once
            return self.drain()

        try:
            while not stop.is_set():
                try:  # its own supervisor: any failure is logged and waited out, never raised
                    acked = retry_call(
                        one_pass,
                        retriable=lambda exc: True,
                        backoff=backoff,
                        wait=stop.wait,
                        on_retry=_report_failure,
                    )
                except Exception:
                    if stop.is_set():
                        return  # a stop ended the retrying; nothing else does
                    raise
                if acked == 0:
                    self._idle.wait(stop)
        finally:
            self.close()

    def wake(self) -> None:
        """Rows were committed just now: end the idle wait (a writer in this process calls it)."""
        self._idle.wake()

    def close(self, timeout: float = 2.0) -> None:
        # Unconfirmed records are simply not acked: the next relay resends them.
        if self._producer is not None:
            self._producer.flush(timeout)
            self._producer = None
        if self._store is not None:
            self._store.shutdown(wait=True)
            self._store = None
        self._acker.close()
        self._read.close()
        self._idle.close()

    # -- steps -------------------------------------------------------------------------------
    def _pump(self, *, max_batches: int | None) -> int:
        # Pipelined: this thread produces batch k, then reads batch k+1 while the broker works
        # on k; the store thread acks batch k-1; up to ``pipeline_depth`` batches are with the
        # broker at once. The read stays on this thread: sqlite3 hands the GIL back and forth
        # on every row it steps, and a reader on a second thread waits for the producing thread
        # at each hand-off (measured: 5x slower than the same read done here).
        if self._fatal and self._producer is not None:
            # an idempotent producer in a fatal state must be rebuilt (its unconfirmed rows are
            # still pending, so they simply go out again)
            self._producer.flush(0)
            self._producer, self._fatal = None, False
        store = self._store_thread()
        window: deque[Batch] = deque()
        acks: deque[tuple[Future[None], list[Any], list[Any]]] = deque()
        broken: set[tuple[str, str]] = set()  # branches with a failed row: no more acks now
        started = acked = failed = 0
        rows: list[Any] | None = self._fetch(first=True)
        while rows is not None or window:
            if rows is not None and len(window) < self.pipeline_depth:
                if not rows or broken or self._stopping():
                    rows = None
                    continue
                started += 1
                if self.hooks.ack_before_delivery_report:  # PLANTED BUG (tests only)
                    self._ack(rows)
                    self.hooks.at(Window.ACKED_BEFORE_REPORT)
                window.append(self._produce(rows))
                more = len(rows) == self.batch_size and (
                    max_batches is None or started < max_batches
                )
                rows = self._fetch(first=False) if more else None
                continue
            batch = window.popleft()
            self._settle(batch)
            if batch.done:
                self.hooks.at(Window.REPORTED_NOT_MARKED)  # a crash point (tests only)
            confirmed, errors = self._confirmed(batch, broken)
            # acks run in order on the store thread; the guard in _ACK keeps each branch's
            # "sent" a prefix even if an earlier ack failed
            refused = batch.refused() if errors else []
            errors = [e for e in errors if e is not HELD_BACK]
            future = self._ack_in_order(store, acks, confirmed, last=rows is None and not window)
            acks.append((future, confirmed, errors))
            if refused:  # after this batch's acks, so each refused row heads its branch
                acks.append((store.submit(self._fail, refused), [], []))
            failed += len(errors) - len(refused)
            # at most pipeline_depth batches confirmed but not yet marked sent: with as many in
            # flight, a kill -9 replays at most 2 x pipeline_depth batches (the fold drops them)
            acked += self._collect(acks, wait=False, keep=self.pipeline_depth)
        acked += self._collect(acks, wait=True)
        # A pass that read every unsent row and shipped it all leaves no backlog (but rows
        # committed since): the gauges go to 0 with no query. Otherwise they are refreshed from
        # the store at once when the relay turns idle, else on the interval (an idle relay
        # passes every idle_wait_s and must not count the backlog each time).
        if not failed and not broken and not self._stopped and self._read.drained():
            self.metrics.backlog_rows.set(0)
            self.metrics.oldest_unsent_age_seconds.set(0.0)
        else:
            self._observe_backlog(force=acked == 0 and self._was_busy)
        self._was_busy = acked > 0
        if acked == 0 and not failed:
            self.metrics.relay_lag_seconds.set(0)
        if failed:
            raise BrokerError(
                f"outbox relay: {failed} deliveries failed; {acked} acked, "
                "the rest will be resent from each branch's lowest unacknowledged lsn",
                context={"failed": failed, "acked": acked},
            )
        return acked

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

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

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
            rows = self._read.read(first=first, stopped=self._stopped)
        except (SQLAlchemyError, self._dbapi_error) as exc:
            raise StoreError(f"outbox relay: cannot read the outbox: {exc}") from exc
        # id order is lsn order within each branch (inv. 2), which is all the producer needs
        return rows

    def _produce(self, rows: list[Any]) -> Batch:
        producer = self._ensure_producer()
        produce = producer.produce
        batch = Batch(rows)
        report = batch.report
        stopped = self._stopped if self._stopped is not None else set()
        fold_headers = self._fold_headers
        for i, (_id, tenant, branch, lsn, topic, key, value, blob, _created) in enumerate(rows):
            if stopped and (tenant, branch) in stopped:
                report(i, HELD_BACK, None)
                continue
            headers = unpack_headers(blob) + fold_headers(tenant, branch, lsn)
            headers = TRACING.produced(topic, headers) if TRACING.on else headers
            try:
                produce(
                    topic, value=value, key=key, headers=headers, on_delivery=partial(report, i)
                )
            except BufferError:
                self._produce_when_room(batch, i, rows[i], headers)
            except Exception as exc:  # noqa: BLE001 - KafkaException and friends: a failure
                self._refused_at_once(batch, i, tenant, branch, exc, stopped)
        producer.poll(0)
        return batch

    def _produce_when_room(self, batch: Batch, i: int, row: Any, headers: Any) -> None:
        """The local queue is full: serve delivery reports until ``row`` fits."""
        producer = self._producer
        while True:
            producer.poll(0.05)
            try:
                producer.produce(
                    row[4],
                    value=row[6],
                    key=row[5],
                    headers=headers,
                    on_delivery=partial(batch.report, i),
                )
                return
            except BufferError:
                continue
            except Exception as exc:  # noqa: BLE001 - as in _produce
                stopped = self._stopped if self._stopped is not None else set()
                self._refused_at_once(batch, i, row[1], row[2], exc, stopped)
                return

    def _refused_at_once(
        self,
        batch: Batch,
        i: int,
        tenant: str,
        branch: str,
        exc: Exception,
        stopped: set[tuple[str, str]],
    ) -> None:
        batch.report(i, exc, None)
        if permanent_reason(exc) is not None:
            stopped.add((tenant, branch))  # hold the rest of the branch back now
            self._stopped = stopped

    def _settle(self, batch: Batch) -> None:
        """Wait for every report of ``batch``, however long the broker is away (the producer never
        times a record out: see ``_conf``). Past ``delivery_timeout_s`` the unconfirmed rows are
        reported once -- a warning and ``publish_errors_total{reason="timeout"}`` -- and the
        backlog gauges keep moving; the rows stay queued in order. A stop ends the wait after a
        short grace: what is unconfirmed stays pending and is resent later."""
        producer = self._producer
        started = time.monotonic()
        late: float | None = started + self.delivery_timeout_s
        grace: float | None = None
        while batch.done < len(batch.rows):
            producer.poll(0.05)
            now = time.monotonic()
            if late is not None and now > late:
                late = None
                waiting = len(batch.rows) - batch.done
                self.metrics.publish_error(PublishFailure.TIMEOUT, waiting)
                log.warning(
                    "outbox relay: %d deliveries unconfirmed after %.0f s (is the broker "
                    "reachable?); they stay queued in lsn order until it confirms them",
                    waiting,
                    now - started,
                )
            if late is None:
                self._observe_backlog()
            if self._stop is not None and self._stop.is_set():
                grace = grace or now + 2.0
                if now > grace:
                    break  # stopping: unconfirmed rows stay pending and are resent later

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
        for row in rows:
            try:
                done = fail_row(self.engine, row, self._terminal_sink)
            except SQLAlchemyError as exc:
                stopped.discard((row.tenant, row.branch_key))  # still pending: tried again
                raise StoreError(f"outbox relay: cannot mark row {row.id} failed: {exc}") from exc
            if done:
                stopped.add((row.tenant, row.branch_key))
                self.metrics.rows_failed_total.labels(reason=row.reason).inc()
                log.error(
                    "outbox relay: row %d (branch %s/%s lsn %d, topic %s) refused for good: %s "
                    "(%s); the row is FAILED and its branch is stopped behind it",
                    row.id,
                    row.tenant,
                    row.branch_key,
                    row.lsn,
                    row.topic,
                    row.reason,
                    row.error,
                )
            else:
                stopped.discard((row.tenant, row.branch_key))  # an earlier row goes first
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
        self._observe_backlog()

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
