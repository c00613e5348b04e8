"""The relay: ship committed outbox rows to Kafka, ack only what the broker confirmed.

Seed 003, steps 1-3: its own process and supervision; loop drain -> publish in
``(BranchKey, Lsn)`` order -> ack only what the broker accepted; retry with backoff inside;
never propagate a broker error into run execution (writers never see the relay at all).

Per batch: read the oldest pending rows, publish them in ``(tenant, branch_key, lsn)`` order with
the idempotent ``acks=all`` producer, wait for every delivery report, then mark sent -- per
branch -- only the unbroken run of confirmed rows from its lowest pending lsn. A branch whose row
failed is resent from that row on the next pass (a timed-out record may still have been written:
the consumer's fold absorbs the copy).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, bindparam, exists, select, update
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import BrokerError, FleetError, StoreError
from pipeline.kafka.settings import producer_config

from .headers import fold_headers, unpack_headers
from .metrics import OutboxMetrics, PublishFailure
from .status import backlog
from .tables import RowStatus, outbox

log = logging.getLogger(__name__)

ProducerFactory = Callable[[dict[str, Any]], Any]


def _default_producer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    return Producer(conf)


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
        producer_factory: ProducerFactory | None = None,
    ) -> None:
        self.engine = engine
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
                "message.timeout.ms": int(delivery_timeout_s * 1000),
                "error_cb": self._on_client_error,
                **dict(producer_overrides or {}),
            },
        )
        self._factory = producer_factory or _default_producer
        self._producer: Any = None
        self._fatal = False
        self._stop: threading.Event | None = None
        self._next_metrics = 0.0
        c = outbox.c
        select_rows = (
            select(
                c.id,
                c.tenant,
                c.branch_key,
                c.lsn,
                c.topic,
                c.key,
                c.value,
                c.headers,
                c.created_at,
            )
            .where(c.status == int(RowStatus.PENDING))
            .order_by(c.id)
        )
        if tenant is not None:
            select_rows = select_rows.where(c.tenant == tenant)
        self._select = select_rows

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
        backoff = self.backoff_initial_s
        try:
            while not stop.is_set():
                try:
                    acked = self.drain()
                except FleetError as exc:
                    log.warning("outbox relay: %s; retrying in %.1fs", exc, backoff)
                    stop.wait(backoff * random.uniform(0.8, 1.2))
                    backoff = min(backoff * 2, self.backoff_max_s)
                    continue
                except Exception:  # its own supervisor: log, back off, go on
                    log.exception("outbox relay: unexpected error; retrying in %.1fs", backoff)
                    stop.wait(backoff)
                    backoff = min(backoff * 2, self.backoff_max_s)
                    continue
                backoff = self.backoff_initial_s
                if acked == 0:
                    stop.wait(self.idle_wait_s)
        finally:
            self.close()

    def close(self, timeout: float = 2.0) -> None:
        # Unconfirmed records are simply not acked: the next relay resends them.
        if self._producer is not None:
            self._producer.flush(timeout)
            self._producer = None

    # -- steps -------------------------------------------------------------------------------
    def _pump(self, *, max_batches: int | None) -> int:
        window: deque[_Batch] = deque()
        broken: set[tuple[str, str]] = set()  # branches with a failed row: no more acks now
        started = acked = failed = 0
        exhausted = False
        cursor: int | None = None
        while True:
            may_fetch = (
                not exhausted
                and not broken
                and len(window) < self.pipeline_depth
                and (max_batches is None or started < max_batches)
                and not (self._stop is not None and self._stop.is_set())
            )
            if may_fetch:
                rows = self._fetch(cursor)
                exhausted = len(rows) < self.batch_size
                if rows:
                    cursor = max(r[0] for r in rows)
                    window.append(self._produce(rows))
                    started += 1
                    continue
            if not window:
                break
            batch = window.popleft()
            self._settle(batch)
            confirmed, errors = self._confirmed(batch, broken)
            self._ack(confirmed)  # a StoreError leaves rows pending: resent, folded away
            self._observe(confirmed, errors)
            acked += len(confirmed)
            failed += len(errors)
        self._observe_backlog(force=acked == 0)
        if acked == 0 and not failed:
            self.metrics.relay_lag_seconds.set(0)
        if failed:
            raise BrokerError(
                f"outbox relay: {failed} deliveries failed; {acked} acked, "
                "the rest will be resent from each branch's lowest unacknowledged lsn",
                context={"failed": failed, "acked": acked},
            )
        return acked

    def _fetch(self, cursor: int | None) -> list[Any]:
        # The first fetch of a pass starts at the oldest pending row; later ones continue after
        # the last id fetched. On PostgreSQL a lower id can commit after a higher one: such a
        # late row is picked up by the next pass, and the ack guard below keeps "sent" a
        # per-branch watermark meanwhile.
        stmt = self._select if cursor is None else self._select.where(outbox.c.id > cursor)
        try:
            with self.engine.connect() as conn:
                rows = list(conn.execute(stmt.limit(self.batch_size)).all())
        except SQLAlchemyError as exc:
            raise StoreError(f"outbox relay: cannot read the outbox: {exc}") from exc
        rows.sort(key=_branch_order)
        return rows

    def _produce(self, rows: list[Any]) -> _Batch:
        producer = self._ensure_producer()
        batch = _Batch(rows)
        for i, (_id, tenant, branch, lsn, topic, key, value, blob, _created) in enumerate(rows):
            headers = unpack_headers(blob) + fold_headers(tenant, branch, lsn)
            callback = functools.partial(batch.report, i)
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, headers=headers, on_delivery=callback
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: serve reports, then retry
                except Exception as exc:  # noqa: BLE001 - KafkaException and friends: a failure
                    batch.report(i, exc, None)
                    break
        producer.poll(0)
        return batch

    def _settle(self, batch: _Batch) -> None:
        """Wait for every report of ``batch`` (message.timeout.ms bounds each one)."""
        producer = self._producer
        deadline = time.monotonic() + self.delivery_timeout_s + 5.0
        grace: float | None = None
        while batch.done < len(batch.rows) and time.monotonic() < deadline:
            producer.poll(0.05)
            if self._stop is not None and self._stop.is_set():
                grace = grace or time.monotonic() + 2.0
                if time.monotonic() > grace:
                    break  # stopping: unconfirmed rows stay pending and are resent later
        if self._fatal:
            self.close(0)  # an idempotent producer in a fatal state must be rebuilt
            self._fatal = False

    @staticmethod
    def _confirmed(batch: _Batch, broken: set[tuple[str, str]]) -> tuple[list[Any], list[Any]]:
        # rows are sorted by (tenant, branch, lsn) and each branch continues from its lowest
        # pending lsn, so acking only the unbroken confirmed run keeps "sent" a per-branch
        # watermark: after a failure the branch is resent from the failed row on.
        confirmed: list[Any] = []
        errors: list[Any] = []
        for row, err in zip(batch.rows, batch.results, strict=True):
            if err is not None:
                errors.append(BrokerError("no delivery report") if err is _UNRESOLVED else err)
            branch = (row[1], row[2])
            if branch in broken:
                continue
            if err is None:
                confirmed.append(row)
            else:
                broken.add(branch)
        return confirmed, errors

    def _ack(self, rows: list[Any]) -> None:
        if not rows:
            return
        params: list[dict[str, Any]] = []
        now = time.time()
        for row in rows:  # rows of a branch are consecutive lsns: one range per branch
            if params and params[-1]["t"] == row[1] and params[-1]["b"] == row[2]:
                params[-1]["hi"] = row[3]
            else:
                params.append({"t": row[1], "b": row[2], "lo": row[3], "hi": row[3], "now": now})
        try:
            with self.engine.begin() as conn:
                conn.execute(_ACK, params)
        except SQLAlchemyError as exc:
            # Not acked: these rows go out again; the consumer's fold drops the copies.
            raise StoreError(f"outbox relay: cannot ack {len(rows)} rows: {exc}") from exc

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
            oldest = min(r[8] for r in confirmed)
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
            count, oldest = backlog(self.engine, tenant=self.tenant)
        except SQLAlchemyError as exc:
            log.warning("outbox relay: cannot read the backlog: %s", exc)
            return
        self.metrics.backlog_rows.set(count)
        self.metrics.oldest_unsent_age_seconds.set(
            0.0 if oldest is None else max(0.0, time.time() - oldest)
        )


_UNRESOLVED: Any = object()


def _branch_order(row: Any) -> tuple[str, str, int]:
    return (row[1], row[2], row[3])


class _Batch:
    """Rows handed to the producer together, and their delivery reports as they come in."""

    __slots__ = ("done", "results", "rows")

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows
        self.results: list[Any] = [_UNRESOLVED] * len(rows)
        self.done = 0

    def report(self, index: int, err: Any, _msg: Any) -> None:
        if self.results[index] is _UNRESOLVED:
            self.done += 1
        self.results[index] = err


_earlier = outbox.alias("earlier")
# Mark a confirmed run of one branch sent -- unless an earlier lsn of that branch is still pending
# (a row that committed late, or one that failed): then nothing of the run is acked and the whole
# branch is resent from its lowest unacknowledged lsn. "sent" is always a per-branch prefix.
_ACK = (
    update(outbox)
    .where(
        outbox.c.tenant == bindparam("t"),
        outbox.c.branch_key == bindparam("b"),
        outbox.c.lsn >= bindparam("lo"),
        outbox.c.lsn <= bindparam("hi"),
        # DROPPED too: a rewind that committed while the row was in flight cannot unsend it, and
        # the store should say truthfully that it went out ("dropped" = never published)
        outbox.c.status != int(RowStatus.SENT),
        ~exists().where(
            _earlier.c.tenant == bindparam("t"),
            _earlier.c.branch_key == bindparam("b"),
            # pending rows of a branch are a suffix, so checking lsn lo-1 is enough (and O(1))
            _earlier.c.lsn == bindparam("lo") - 1,
            _earlier.c.status == int(RowStatus.PENDING),
        ),
    )
    .values(status=int(RowStatus.SENT), sent_at=bindparam("now"))
)


def classify(err: Any) -> PublishFailure:
    """Fold a delivery error into :class:`PublishFailure` (bounded label values)."""
    try:
        from confluent_kafka import KafkaError
    except ImportError:  # pragma: no cover - the dependency is required
        return PublishFailure.OTHER
    if not isinstance(err, KafkaError):
        return PublishFailure.OTHER
    if err.fatal():
        return PublishFailure.FATAL
    code = err.code()
    if code == KafkaError._MSG_TIMED_OUT:
        return PublishFailure.TIMEOUT
    if code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
        return PublishFailure.TRANSPORT
    if code in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ):
        return PublishFailure.REJECTED
    return PublishFailure.OTHER
