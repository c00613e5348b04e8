"""Feeds a :class:`RosterView` from the roster topic: rebuilt from offset 0 at start, then kept
current (R-PRES-2: "consume -> maintain the union view").

Besides applying records, the follower keeps the view's **horizon**: every ``check_s`` it asks
the broker for the roster's log end (time ``t0``) and, once its own positions reach it, marks
the view current as of ``t0``. Liveness is judged against that horizon, so while the follower is
cut off (it cannot fetch, or it lags the log end) nobody lapses; past ``stale_after_s`` without a
new horizon the view says STALE (one log line when it starts, one when it ends, a gauge). It is
current again only once the horizon is back within half of ``stale_after_s``: a horizon renewed
from a heartbeat queued through the outage is already seconds old, and judged against the bound
itself it aged out again before the next fresh heartbeat was read (STALE twice for one outage).

A readable log end is not yet a roster that commits: a replica that died while still in the
partition's ISR holds the high watermark until the controller fences it, so no heartbeat becomes
readable while the log end still answers. A gateway's follower therefore also watches its
**own heartbeats come back** (``own_gid``): the horizon never runs more than ``echo_slack_s``
past the newest one of this run it has read, nor, until the first is read, past the catch-up
(a gateway starting can read a peer's heartbeats before its own first one is back, and a stall
then proves nothing commits). Nobody lapses because nobody's heartbeat could be read; a host
silent while ours were read still does.

Broker errors go through :func:`pipeline.kafka.errors.classify`: transient ones (a leader not yet
known just after the topic was created, a leader move, timeouts, transport) are waited out with
backoff and reported; fatal ones raise a non-retriable error that stops the gateway loudly.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from pipeline.errors import BrokerError, FleetError
from pipeline.kafka.clients import ClientFactory, new_consumer
from pipeline.kafka.errors import BrokerErrorClass, as_fleet_error, classify
from pipeline.kafka.settings import consumer_config
from pipeline.kafka.topics import TopicNames
from pipeline.support.clock import now_ms
from pipeline.support.retrying import Backoff, retry_call

from .metrics import PresenceMetrics
from .roster import RosterView

log = logging.getLogger(__name__)


def echo_slack_s(*, ttl_s: float, interval_s: float) -> float:
    """How far a gateway's horizon may run past its own newest heartbeat read back: half a TTL
    (a roster that stops committing lapses nobody whose heartbeats stopped with ours), at least
    one interval (the view never looks stale between two of our heartbeats)."""
    return max(ttl_s / 2, interval_s)


class RosterFollower:
    """Reads every partition of the roster with ``assign`` (no group offsets: the view is always
    rebuilt from the compacted log, which is what makes it a union view after a restart)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        view: RosterView,
        topics: TopicNames = TopicNames(),
        poll_s: float = 0.5,
        check_s: float = 1.0,
        stale_after_s: float = 5.0,
        request_timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
        metrics: PresenceMetrics | None = None,
        consumer_factory: ClientFactory = new_consumer,
        clock_ms: Callable[[], int] = now_ms,
        own_gid: str | None = None,
        echo_slack_s: float = 0.0,
    ) -> None:
        self.view = view
        self.topics = topics
        self._poll_s = poll_s
        self._check_s = check_s
        self._stale_after_ms = round(stale_after_s * 1000)
        self._current_within_ms = self._stale_after_ms // 2
        self._timeout_s = request_timeout_s
        self._max_backoff_s = max_backoff_s
        self._metrics = metrics
        self._clock = clock_ms
        # this gateway's own heartbeats (its host entry), read back: what proves the roster
        # commits. Only this run's count (an older run's last record proves nothing now).
        self._own_gid = own_gid
        self._echo_slack_ms = round(echo_slack_s * 1000)
        self._since_ms = clock_ms()
        self._own_echo_ms: int | None = None
        # the catch-up's t0: what bounds the horizon until the first own heartbeat is read
        self._caught_up_ms: int | None = None
        self._consumer = consumer_factory(
            consumer_config(bootstrap, f"{topics.prefix}roster-reader.{uuid.uuid4().hex[:12]}")
        )
        self._parts: list[TopicPartition] = []
        self._problem = ""  # the last broker error met, for the STALE line
        self._stale = False
        self.caught_up = threading.Event()
        self.transient_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- catch-up ------------------------------------------------------------------------------
    def catch_up(self, timeout_s: float = 30.0, stop: threading.Event | None = None) -> int:
        """Assign all roster partitions from the beginning and apply records up to the end
        offsets seen now; transient broker errors are waited out (backoff) until ``timeout_s``.
        Returns the number of records read."""
        deadline = time.monotonic() + timeout_s

        def once() -> int:
            try:
                return self._catch_up_once(deadline)
            except (KafkaException, FleetError) as exc:
                err = self._report(exc, "catch-up")  # counted; a fatal one raises here
                if err is exc:
                    raise
                raise err from exc

        try:
            count = retry_call(
                once,
                retriable=lambda exc: isinstance(exc, FleetError) and exc.retriable,
                backoff=Backoff(initial_s=0.1, max_s=self._max_backoff_s),
                deadline_s=timeout_s,
                wait=time.sleep if stop is None else stop.wait,
            )
        except FleetError as err:
            if not err.retriable:
                raise
            if stop is not None and stop.is_set():
                return 0
            raise BrokerError(
                f"roster catch-up did not finish within {timeout_s:.0f} s: {err}",
                reason=err.reason,
            ) from err
        if self.transient_errors:
            log.info("roster: caught up after waiting out %d broker errors", self.transient_errors)
        self.caught_up.set()
        return count

    def _catch_up_once(self, deadline: float) -> int:
        topic = self.topics.roster
        meta = self._consumer.list_topics(topic, timeout=self._timeout_s)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            err = tmeta.error if tmeta is not None else KafkaError(KafkaError._UNKNOWN_TOPIC)
            raise as_fleet_error(_exc(err), f"roster topic {topic} unavailable")
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(tmeta.partitions)]
        t0 = self._clock()
        ends = self._ends(parts)
        self._consumer.assign(parts)
        self._parts = [TopicPartition(topic, tp.partition) for tp in parts]
        count = 0
        while not self._reached(ends):
            if time.monotonic() >= deadline:
                raise BrokerError(f"roster catch-up timed out; behind: {sorted(ends)}")
            msg = self._consumer.poll(self._poll_s)
            if msg is not None:
                count += self._handle(msg)
        self._caught_up_ms = t0
        self.view.mark_current(self._horizon(t0))
        return count

    def _ends(self, parts: list[TopicPartition]) -> dict[int, int]:
        """Log end offsets of the non-empty partitions (a broker request, never the cache)."""
        ends = {}
        for tp in parts:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=self._timeout_s, cached=False
            )
            if high > low:
                ends[tp.partition] = high
        return ends

    def _reached(self, ends: dict[int, int]) -> bool:
        # positions, not message offsets: a position moves past transaction markers and
        # compacted gaps that are never delivered as messages
        if not ends:
            return True
        topic = self.topics.roster
        positions = self._consumer.position([TopicPartition(topic, p) for p in ends])
        return all(tp.offset >= ends[tp.partition] for tp in positions)

    # -- errors ---------------------------------------------------------------------------------
    def _report(self, exc: BaseException, op: str) -> FleetError:
        """Raise fatal errors; count and remember transient ones (logged once per episode)."""
        err = as_fleet_error(exc, f"roster {op}")
        kind = BrokerErrorClass.TRANSIENT if err.retriable else classify(exc)
        if self._metrics is not None:
            self._metrics.roster_broker_errors.labels(kind.value).inc()
        if not err.retriable:
            log.error("roster: %s: %s (not retriable: stopping)", op, err)
            raise err from exc
        self.transient_errors += 1
        if not self._problem:
            log.warning("roster: %s: %s (transient: waiting it out with backoff)", op, err)
        else:
            log.debug("roster: %s: %s", op, err)
        self._problem = str(err)
        return err

    # -- following ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Catch up (waiting out transient errors), then follow until ``stop``; the gateway's
        supervised roster loop. A fatal broker error raises (the gateway stops, loudly)."""
        while not self.caught_up.is_set():
            if stop.is_set():
                return
            try:
                self.catch_up(timeout_s=60.0, stop=stop)
            except FleetError as exc:
                if not exc.retriable:
                    raise
        pending: tuple[int, dict[int, int]] | None = None
        next_check = 0.0
        while not stop.is_set():
            msg = self._consumer.poll(self._poll_s)
            if msg is not None:
                self._handle(msg)
            if pending is None and time.monotonic() >= next_check:
                next_check = time.monotonic() + self._check_s
                t0 = self._clock()
                try:
                    pending = (t0, self._ends(self._parts))
                except (KafkaException, FleetError) as exc:
                    self._report(exc, "log-end check")
            if pending is not None:
                try:
                    reached = self._reached(pending[1])
                except (KafkaException, FleetError) as exc:
                    self._report(exc, "position")
                    reached = False
                if reached:
                    self.view.mark_current(self._horizon(pending[0]))
                    pending = None
            self._judge()

    def _horizon(self, t0: int) -> int:
        """``t0`` (the log end was read then and reached), held back to ``echo_slack_s`` past
        the newest own heartbeat read: while none comes back, the roster is not committing.
        Before the first is read, past the catch-up: a roster that stalls after a peer's
        heartbeat was read but before our first came back has proved no commit either (judged
        by the log end alone, the peer lapsed one TTL into the stall)."""
        if self._own_gid is None:
            return t0
        newest = self._own_echo_ms if self._own_echo_ms is not None else self._caught_up_ms
        if newest is None:  # not caught up yet
            return t0
        return min(t0, newest + self._echo_slack_ms)

    def _echo_missing(self) -> bool:
        return self._horizon(self._clock()) < self._clock()

    def _judge(self) -> None:
        now = self._clock()
        horizon = self.view.freshness().horizon_ms
        age_ms = 0 if horizon is None else now - horizon
        if self._metrics is not None:
            self._metrics.roster_horizon_age.set(max(0, age_ms) / 1000)
        stale = age_ms > (self._current_within_ms if self._stale else self._stale_after_ms)
        if stale == self._stale:
            return
        self._stale = stale
        if self._metrics is not None:
            self._metrics.roster_stale.set(1 if stale else 0)
        if stale:
            why = self._problem or (
                "no own heartbeat read back: the roster does not commit"
                if self._echo_missing()
                else "behind the roster's log end"
            )
            self.view.mark_stale(True, why)
            log.warning(
                "roster: STALE -- cut off for %.0f s (%s); entries keep their last state, "
                "nobody lapses until the roster can be read again",
                age_ms / 1000,
                why,
            )
        else:
            self.view.mark_stale(False)
            log.info(
                "roster: current again (%d transient broker errors so far)", self.transient_errors
            )
            self._problem = ""

    def _handle(self, msg: Message) -> int:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                self._report(_exc(err), "fetch")
            return 0
        if self._problem and not self._stale:
            self._problem = ""
        headers = msg.headers()
        entry = self.view.apply(
            topic=msg.topic() or "",
            key=msg.key(),
            headers=list(headers.items()) if isinstance(headers, dict) else headers,
            value=msg.value(),
        )
        if (
            entry is not None
            and entry.gid == self._own_gid
            and entry.ts_ms >= self._since_ms
            and (self._own_echo_ms is None or entry.ts_ms > self._own_echo_ms)
        ):
            self._own_echo_ms = entry.ts_ms
        return 1

    def start(self, timeout_s: float = 30.0) -> RosterFollower:
        """Catch up now, then follow in a thread of our own (tools; the gateway calls
        :meth:`run` from its supervised loop instead)."""
        self.catch_up(timeout_s)
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), name="roster-follower", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self._closed:
            self._closed = True
            self._consumer.close()


def _exc(err: KafkaError) -> Exception:
    return KafkaException(err)
