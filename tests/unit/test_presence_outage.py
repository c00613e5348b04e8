"""R-PRES-3 without a broker: the roster follower waits out transient broker errors (the
one-start-in-three NOT_LEADER_FOR_PARTITION right after the roster topic is created), stops on
fatal ones, marks the view STALE once while cut off; the publisher logs one line per episode;
verification step 2 uses the last signed binding."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.envelope import Envelope, Kind, encode
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError, FleetError
from pipeline.kafka.errors import BrokerErrorClass, as_fleet_error, classify
from pipeline.presence import (
    Delivery,
    PresenceEntry,
    PresencePublisher,
    Role,
    RosterFollower,
    RosterView,
    presence_record,
)
from pipeline.presence.follower import echo_slack_s
from pipeline.presence.metrics import PresenceMetrics
from pipeline.presence.model import gateway_gid
from pipeline.testing import FakeMessage
from tests.envelope_kit import Fleet

TRANSIENT = [
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
]
FATAL = [
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._AUTO_OFFSET_RESET,
]


class _Meta:
    def __init__(self, topic: str) -> None:
        part = type("P", (), {})()
        tmeta = type("T", (), {"partitions": {0: part}, "error": None})()
        self.topics = {topic: tmeta}


class FlakyConsumer:
    """Answers metadata; its watermark read fails with ``code`` ``failures`` times first."""

    def __init__(self, topic: str, code: int, failures: int) -> None:
        self.topic, self.code, self.failures = topic, code, failures
        self.calls = 0
        self.high = 0

    def list_topics(self, topic: str, timeout: float) -> _Meta:
        return _Meta(self.topic)

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return 0, self.high

    def assign(self, parts: Any) -> None:
        pass

    def position(self, tps: Any) -> list[Any]:
        return tps  # offsets -1001 < any high: only used when high > 0

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


def _follower(f: Fleet, consumer: FlakyConsumer, **kw: Any) -> tuple[RosterFollower, RosterView]:
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    follower = RosterFollower(
        bootstrap="unused:1",
        view=view,
        topics=f.topics,
        consumer_factory=lambda conf: consumer,
        max_backoff_s=0.01,
        clock_ms=lambda: f.now,
        **kw,
    )
    return follower, view


def _follow(
    follower: RosterFollower,
    consumer: FlakyConsumer,
    f: Fleet,
    *,
    ticks: int,
    step_ms: int,
    at: dict[int, Any] | None = None,
) -> None:
    """Run ``follower`` for ``ticks`` polls, the clock ``step_ms`` on at each; ``at``: what
    happens at a tick."""
    stop = threading.Event()
    n = 0

    def tick(timeout: float) -> None:
        nonlocal n
        n += 1
        f.now += step_ms
        if at and n in at:
            at[n]()
        if n == ticks:
            stop.set()

    consumer.poll = tick  # type: ignore[method-assign]
    follower.run(stop)


@pytest.mark.parametrize("code", TRANSIENT, ids=lambda c: KafkaError(c).name())
def test_catch_up_waits_out_transient_watermark_errors(code: int) -> None:
    f = Fleet()
    consumer = FlakyConsumer(f.topics.roster, code, failures=5)
    registry = CollectorRegistry()
    follower, view = _follower(f, consumer, metrics=PresenceMetrics(registry))
    follower.catch_up(timeout_s=10)
    assert follower.caught_up.is_set() and follower.transient_errors == 5
    assert view.freshness().horizon_ms == f.now
    got = registry.get_sample_value(
        "fleet_roster_broker_errors_total", {"error_class": "transient"}
    )
    assert got == 5


@pytest.mark.parametrize("code", FATAL, ids=lambda c: KafkaError(c).name())
def test_catch_up_stops_on_fatal_errors_with_a_non_retriable_error(code: int) -> None:
    f = Fleet()
    follower, _ = _follower(f, FlakyConsumer(f.topics.roster, code, failures=1))
    with pytest.raises(FleetError) as info:
        follower.run(threading.Event())
    # a security refusal has its own reason (docs/security.md); the rest BROKER_FATAL
    security = {
        KafkaError.TOPIC_AUTHORIZATION_FAILED: "NOT_AUTHORIZED",
        KafkaError.SASL_AUTHENTICATION_FAILED: "AUTH_FAILED",
    }
    assert not info.value.retriable
    assert info.value.reason == security.get(code, "BROKER_FATAL")


def test_follower_marks_the_view_stale_once_and_current_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the log-end check fails the horizon stands still: STALE after the tolerance, one
    warning for the whole episode, one line when it ends."""
    f = Fleet()
    consumer = FlakyConsumer(f.topics.roster, KafkaError._TRANSPORT, failures=0)
    follower, view = _follower(f, consumer, check_s=0, stale_after_s=5, poll_s=0)
    follower.catch_up(timeout_s=5)
    consumer.failures = 10**9  # the broker goes away

    def back() -> None:
        consumer.failures = 0

    with caplog.at_level(logging.DEBUG, logger="pipeline.presence.follower"):
        _follow(follower, consumer, f, ticks=70, step_ms=1000, at={60: back})
    warnings = [m for m in caplog.records if m.levelno >= logging.WARNING]
    assert [m.getMessage().split(" --")[0] for m in warnings] == [
        "roster: log-end check: [BROKER_UNAVAILABLE] roster log-end check: _TRANSPORT: Local: "
        "Broker transport failure (transient: waiting it out with backoff)",
        "roster: STALE",
    ]
    assert any("current again" in m.getMessage() for m in caplog.records)
    assert not view.freshness().stale and view.freshness().horizon_ms is not None


def test_a_request_whose_connection_lost_its_login_is_waited_out_not_a_refusal() -> None:
    """R-PRES-3 under KIP-368 re-authentication (CI, OAUTHBEARER with connections.max.reauth.ms):
    a re-authentication met the broker in the wrong SASL state, and the roster's next log-end
    check failed with librdkafka's bare ``_AUTHENTICATION``. The follower stopped the gateway
    with AUTH_FAILED on it. A request's lost login says nothing about the credential (the login
    watch judges the ``error_cb``'s text): the follower waits it out and stays current."""
    f = Fleet()
    consumer = FlakyConsumer(f.topics.roster, KafkaError._AUTHENTICATION, failures=0)
    follower, view = _follower(f, consumer, check_s=0, poll_s=0)
    follower.catch_up(timeout_s=5)
    caught_up_at = f.now
    consumer.failures = consumer.calls + 3  # the next three log-end checks: login lost
    _follow(follower, consumer, f, ticks=10, step_ms=100)  # raised AUTH_FAILED before
    assert follower.transient_errors == 3
    assert consumer.calls > consumer.failures  # it read the log end again after the race
    horizon = view.freshness().horizon_ms
    assert not view.freshness().stale and horizon is not None and horizon >= caught_up_at + 400
    err = as_fleet_error(KafkaException(KafkaError(KafkaError._AUTHENTICATION)), "x")
    assert err.retriable and err.reason == "BROKER_UNAVAILABLE"


def test_classification_table() -> None:
    for code in TRANSIENT:
        assert classify(KafkaException(KafkaError(code))) is BrokerErrorClass.TRANSIENT
    for code in FATAL:
        assert classify(KafkaError(code)) is BrokerErrorClass.FATAL
    assert classify(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)) is BrokerErrorClass.PERMANENT
    err = as_fleet_error(KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)), "x")
    assert err.retriable and err.reason == "BROKER_UNAVAILABLE"


class FailingProducer:
    def __init__(self) -> None:
        self.err: Any = KafkaError(KafkaError._MSG_TIMED_OUT)

    def produce(self, topic: str, **kw: Any) -> None:
        kw["on_delivery"](self.err, None)

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def test_publisher_logs_one_line_when_failing_starts_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    f = Fleet()
    producer = FailingProducer()
    registry = CollectorRegistry()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now, metrics=PresenceMetrics(registry))  # fmt: skip
    pub.register("w1", role="worker", delivery="inject")
    with caplog.at_level(logging.INFO, logger="pipeline.presence.publisher"):
        for _ in range(100):  # 100 heartbeat rounds into a dead broker
            pub.heartbeat()
        assert registry.get_sample_value("fleet_presence_publisher_failing") == 1
        producer.err = None
        pub.heartbeat()
    assert len(caplog.records) == 2, [m.getMessage() for m in caplog.records]
    assert caplog.records[0].levelno == logging.WARNING and "_MSG_TIMED_OUT" in caplog.text
    assert "delivered again" in caplog.records[1].getMessage()
    assert registry.get_sample_value("fleet_presence_heartbeat_failures_total") == 201
    assert registry.get_sample_value("fleet_presence_publisher_failing") == 0


class AwayProducer:
    """A broker away: records queue until ``time_out`` fails them or ``deliver`` sends them."""

    def __init__(self) -> None:
        self.queued: list[Any] = []
        self.produced = 0

    def produce(self, topic: str, **kw: Any) -> None:
        self.produced += 1
        self.queued.append(kw["on_delivery"])

    def time_out(self) -> None:
        queued, self.queued = self.queued, []
        for report in queued:
            report(KafkaError(KafkaError._MSG_TIMED_OUT), None)

    def deliver(self) -> int:
        queued, self.queued = self.queued, []
        for report in queued:
            report(None, None)
        return len(queued)

    def flush(self, timeout: float) -> int:
        return len(self.queued)

    def poll(self, timeout: float) -> int:
        return 0


def test_an_outage_queues_one_heartbeat_round_not_one_per_interval() -> None:
    """R-PRES-2 (presence: the newest record per gid wins) through a broker outage: while a
    round is undelivered and deliveries fail, no new round queues behind it. A round per
    interval did, and the backlog landing at once when the broker came back left every
    follower behind the log end: STALE again right after the outage on a loaded host
    (tests/integration/test_presence_outage.py, CI at load 40: 406 heartbeats in one burst)."""
    f = Fleet()
    producer = AwayProducer()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now)  # fmt: skip
    pub.register("w1", role="worker", delivery="inject")
    producer.deliver()
    assert pub.heartbeat() == 2  # the host entry and w1; still undelivered, nothing failed yet
    assert pub.heartbeat() == 2  # nothing has failed: a slow broker gets every round
    producer.time_out()  # message.timeout.ms: both rounds failed; the outage is on
    for _ in range(100):
        pub.heartbeat()
    assert len(producer.queued) == 2, "one round waits for the broker, not a hundred"
    producer.time_out()  # that round timed out too: the next one queues
    pub.heartbeat()
    pub.heartbeat()
    assert producer.deliver() == 2  # the broker is back: one round lands
    assert pub.heartbeat() == 2 and producer.deliver() == 2  # and the rounds go on


def _sent(f: Fleet, sender: str, signer: str) -> dict[str, Any]:
    env = Envelope.new(kind=Kind.SEND, sender=sender, to="m-b", body=b"x", ttl_s=60, now_ms=f.now)
    key, headers, value = encode(env, topic=f.topics.inbox("b"), signer=f.signers[signer])
    return {"topic": f.topics.inbox("b"), "key": key, "headers": headers, "value": value}


def test_step_2_uses_the_last_binding_not_liveness() -> None:
    """R-PRES-4 after a long silence: a lapsed sender still verifies on its host;
    a gid another host announced is SIGNER_MISMATCH; one nobody announced is UNKNOWN_SENDER."""
    f = Fleet()
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    for gid, host in (("w-a", "a"), ("m-b", "b")):
        e = PresenceEntry(gid=gid, host=host, role=Role.WORKER, delivery=Delivery.PULL,
                          ts_ms=f.now, ttl_ms=5000)  # fmt: skip
        key, headers, value = presence_record(e, signer=f.signers[host], topics=f.topics)
        view.apply(topic=f.topics.roster, key=key, headers=headers, value=value)
    f.now += 60_000
    view.mark_current(f.now)  # the follower kept up: w-a has lapsed for routing
    assert view.live_host("w-a") is None
    f.presence = view  # type: ignore[assignment]
    verifier = f.verifier("b")
    assert verifier.verify(**_sent(f, "w-a", "a")).envelope.sender == "w-a"
    with pytest.raises(EnvelopeError) as mismatch:
        verifier.verify(**_sent(f, "m-b", "a"))
    assert mismatch.value.reason == r.SIGNER_MISMATCH
    with pytest.raises(EnvelopeError) as unknown:
        verifier.verify(**_sent(f, "nobody", "a"))
    assert unknown.value.reason == r.UNKNOWN_SENDER


def test_librdkafka_lines_pass_once_per_kind_then_as_a_summary() -> None:
    from pipeline.kafka.logs import RepeatFilter

    filt = RepeatFilter(summary_s=3600)

    def line(port: int, ms: int) -> logging.LogRecord:
        msg = f"127.0.0.1:{port}/bootstrap: Connect failed: Connection refused (after {ms}ms)"
        return logging.LogRecord("x", logging.ERROR, __file__, 1, msg, None, None)

    passed = [filt.filter(line(9092, i % 7)) for i in range(1000)]
    assert passed.count(True) == 1, "1000 reconnects in an outage: one line"
    other = logging.LogRecord("x", logging.ERROR, __file__, 1, "GroupCoordinator: gone", None, None)
    assert filt.filter(other)
    filt.summary_s = 0
    summary = line(9092, 1)
    assert filt.filter(summary) and "999 identical lines held back" in summary.getMessage()


def test_wait_out_retries_transient_errors_and_raises_fatal_ones_at_once() -> None:
    from pipeline.kafka.errors import wait_out

    log = logging.getLogger("test.wait_out")
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return "ok"

    assert wait_out(flaky, what="t", deadline_s=10, log=log, first_backoff_s=0.001) == "ok"
    assert len(calls) == 3

    def denied() -> str:
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))

    calls.clear()
    with pytest.raises(FleetError) as info:
        wait_out(denied, what="t", deadline_s=10, log=log, first_backoff_s=0.001)
    assert len(calls) == 1 and not info.value.retriable


def test_wait_out_gives_up_at_its_deadline_with_a_retriable_error() -> None:
    from pipeline.kafka.errors import wait_out

    def down() -> str:
        raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))

    with pytest.raises(FleetError) as info:
        wait_out(down, what="t", deadline_s=0.05, log=logging.getLogger("t"), first_backoff_s=0.01)
    assert info.value.retriable and info.value.reason == "BROKER_UNAVAILABLE"


class StallingRoster:
    """One roster partition fed by heartbeats of a's gateway entry and b's ``m-b``, a round every
    ``beat_every`` ticks of its clock (0.5 s each). From tick ``stall_at`` nothing commits: the high watermark
    stands still but stays readable, as while a dead replica is still in the ISR. From tick
    ``b_silent_at`` only b is silent (b went away; a's heartbeats still commit). a's own
    heartbeats commit only from tick ``a_from`` (a gateway starting: b's already read, a's first
    not yet back). From tick ``resume_at`` it commits again: first the round the publishers
    queued through the stall, stamped ``queued_ms`` earlier, then nothing for ``quiet`` ticks,
    then a round a tick."""

    def __init__(
        self,
        f: Fleet,
        *,
        stall_at: int = 10**9,
        b_silent_at: int = 10**9,
        a_from: int = 1,
        beat_every: int = 1,
        ttl_ms: int = 2500,
        resume_at: int = 10**9,
        queued_ms: int = 0,
        quiet: int = 0,
    ) -> None:
        self.f, self.stall_at, self.b_silent_at, self.a_from = f, stall_at, b_silent_at, a_from
        self.resume_at, self.queued_ms, self.quiet = resume_at, queued_ms, quiet
        self.beat_every, self.ttl_ms = beat_every, ttl_ms
        self.committed: list[FakeMessage] = []
        self.delivered = 0
        self.ticks = 0
        self.on_tick: Any = None

    def _beat(self, gid: str, host: str, role: Role, delivery: Delivery, ago_ms: int = 0) -> None:
        e = PresenceEntry(gid=gid, host=host, role=role, delivery=delivery,
                          ts_ms=self.f.now - ago_ms, ttl_ms=self.ttl_ms)  # fmt: skip
        key, headers, value = presence_record(e, signer=self.f.signers[host], topics=self.f.topics)
        topic = self.f.topics.roster
        self.committed.append(FakeMessage(topic, 0, len(self.committed), key, value, headers))

    def tick(self) -> None:
        self.ticks += 1
        self.f.now += 500
        if self.ticks == self.resume_at:
            self._beat(gateway_gid("a"), "a", Role.GATEWAY, Delivery.NONE, self.queued_ms)
            self._beat("m-b", "b", Role.MAIN, Delivery.PULL, self.queued_ms)
        committing = self.ticks < self.stall_at or self.ticks > self.resume_at + self.quiet
        if committing and (self.ticks - 1) % self.beat_every == 0:
            if self.ticks >= self.a_from:
                self._beat(gateway_gid("a"), "a", Role.GATEWAY, Delivery.NONE)
            if self.ticks < self.b_silent_at:
                self._beat("m-b", "b", Role.MAIN, Delivery.PULL)
        if self.on_tick is not None:
            self.on_tick()

    def list_topics(self, topic: str, timeout: float) -> _Meta:
        return _Meta(self.f.topics.roster)

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, len(self.committed)

    def assign(self, parts: Any) -> None:
        pass

    def position(self, tps: Any) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, self.delivered) for tp in tps]

    def poll(self, timeout: float) -> FakeMessage | None:
        if self.delivered < len(self.committed):
            self.delivered += 1
            return self.committed[self.delivered - 1]
        self.tick()
        return None

    def close(self) -> None:
        pass


def _lapses(f: Fleet, roster: StallingRoster, *, ticks: int, **kw: Any) -> list[int]:
    """Follow ``roster`` for ``ticks`` rounds; the ticks at which m-b was not live in the view."""
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    follower = RosterFollower(bootstrap="unused:1", view=view, topics=f.topics,
                              consumer_factory=lambda conf: roster, check_s=0, poll_s=0,
                              stale_after_s=5, clock_ms=lambda: f.now, **kw)  # fmt: skip
    lapsed: list[int] = []
    stop = threading.Event()

    def judge() -> None:
        if view.live_host("m-b") is None:
            lapsed.append(roster.ticks)
        if roster.ticks >= ticks:
            stop.set()

    roster.tick()  # the first round, before the catch-up
    roster.on_tick = judge
    follower.catch_up(timeout_s=5)
    follower.run(stop)
    follower.stop()
    return lapsed


OWN = {"own_gid": gateway_gid("a"), "echo_slack_s": echo_slack_s(ttl_s=2.5, interval_s=0.5)}


def test_a_roster_that_stops_committing_lapses_nobody(caplog: pytest.LogCaptureFixture) -> None:
    """A partial outage (the CI's 3-node kill): the log end stays readable while no
    heartbeat commits. Judged by the log end alone, m-b lapsed one TTL in; held back to the
    gateway's own heartbeats read back, nobody lapses, and STALE says why."""
    f = Fleet()
    with caplog.at_level(logging.WARNING, logger="pipeline.presence.follower"):
        assert _lapses(f, StallingRoster(f, stall_at=10), ticks=40, **OWN) == []
    stale = [m.getMessage() for m in caplog.records if "STALE" in m.getMessage()]
    assert len(stale) == 1 and "no own heartbeat read back" in stale[0], stale
    g = Fleet()  # the same history judged by the log end alone: the bug
    assert _lapses(g, StallingRoster(g, stall_at=10), ticks=40)[0] <= 10 + 6


def test_a_roster_that_stops_committing_before_our_first_heartbeat_is_back_lapses_nobody(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The CI flake: the broker was killed just after b's first heartbeats were read and before
    a's own first one came back (a gateway starting). With no own heartbeat read yet the horizon
    ran on with the log end and m-b lapsed one TTL in; until the first comes back it is held to
    the slack past the catch-up, so nobody lapses and STALE says why."""
    f = Fleet()
    with caplog.at_level(logging.WARNING, logger="pipeline.presence.follower"):
        assert _lapses(f, StallingRoster(f, stall_at=10, a_from=12), ticks=40, **OWN) == []
    stale = [m.getMessage() for m in caplog.records if "STALE" in m.getMessage()]
    assert len(stale) == 1 and "no own heartbeat read back" in stale[0], stale


def test_a_host_silent_before_our_first_heartbeat_is_back_lapses_once_it_is() -> None:
    """Holding the horizon until our first heartbeat comes back hides no departure for longer
    than that: b silent from tick 3 lapses within its TTL plus the slack of a's first one."""
    f = Fleet()
    lapsed = _lapses(f, StallingRoster(f, b_silent_at=3, a_from=12), ticks=30, **OWN)
    assert lapsed and 12 <= lapsed[0] <= 12 + 8, lapsed
    assert lapsed == list(range(lapsed[0], 31)), "lapsed for good"


def test_a_host_silent_while_ours_commit_still_lapses() -> None:
    """The own-heartbeat bound hides no departure: b silent while a's heartbeats commit lapses
    within its TTL plus the slack (2.5 s + 1.25 s: under 8 rounds of 0.5 s)."""
    f = Fleet()
    lapsed = _lapses(f, StallingRoster(f, b_silent_at=10), ticks=30, **OWN)
    assert lapsed and 10 < lapsed[0] <= 10 + 8, lapsed
    assert lapsed == list(range(lapsed[0], 31)), "lapsed for good"


def test_heartbeats_further_apart_than_the_stale_bound_never_read_as_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 12 s interval against the 5 s STALE bound: with the slack at least one interval the
    horizon never lags between two of our own heartbeats. At TTL / 2 alone a TTL of one interval
    (the least the config allows) left it 5.5 s behind before each beat: STALE every interval."""
    for ttl_s in (24.0, 12.0):
        f = Fleet()
        roster = StallingRoster(f, beat_every=24, ttl_ms=int(ttl_s * 1000))
        slack = echo_slack_s(ttl_s=ttl_s, interval_s=12)
        with caplog.at_level(logging.WARNING, logger="pipeline.presence.follower"):
            assert _lapses(f, roster, ticks=240, own_gid=gateway_gid("a"), echo_slack_s=slack) == []
        assert not [m for m in caplog.records if "STALE" in m.getMessage()], ttl_s


def test_a_round_queued_through_the_outage_ends_stale_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 3-node kill: the first round read after the outage was queued
    4.5 s before it committed; its horizon (stamp + the 1.25 s slack) was 3.25 s old, inside the
    5 s bound, so the view went current, aged out 0.6 s later before the next fresh round was
    read, and said STALE a second time. Current again only within half the bound: one episode."""
    f = Fleet()
    roster = StallingRoster(f, stall_at=10, resume_at=40, queued_ms=4500, quiet=4)
    with caplog.at_level(logging.INFO, logger="pipeline.presence.follower"):
        assert _lapses(f, roster, ticks=60, **OWN) == []
    lines = [m.getMessage().split(" --")[0] for m in caplog.records]
    assert [m for m in lines if m == "roster: STALE" or "current again" in m] == [
        "roster: STALE",
        "roster: current again (0 transient broker errors so far)",
    ], lines
