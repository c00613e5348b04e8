"""The runtime's per-batch contract, on FakeConsumer + a real SQLite store (no broker)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pipeline.runtime import ConsumerRuntime, FencedError, Record, RuntimeConfig, Staged
from pipeline.runtime.context import FailureContext
from pipeline.runtime.outcomes import ACK, DeadLetter, Outcome, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import make_engine, session_factory
from pipeline.testing import FakeConsumer

effects_md = MetaData()
effects = Table(
    "effects",
    effects_md,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(50)),
    Column("value", String(50)),
)


class ListSink:
    def __init__(self) -> None:
        self.letters: list[tuple[Record, str, int]] = []

    def stage(self, tx: Staged, failure: FailureContext) -> None:
        tx.after_commit(lambda: None)
        tx.call(lambda _s: self.letters.append((failure.record, failure.reason, failure.attempts)))


class Script:
    """A handler whose outcome per value is scripted; writes an effect row on Ack."""

    def __init__(self, outcomes: dict[str, list[Outcome]] | None = None) -> None:
        self.outcomes = outcomes or {}
        self.calls: list[str] = []
        self.injected: list[str] = []

    def handle(self, record: Record, tx: Staged) -> Outcome:
        value = (record.value or b"").decode()
        self.calls.append(value)
        script = self.outcomes.get(value)
        outcome = script.pop(0) if script else ACK
        if outcome == ACK:
            tx.insert(effects, {"key": record.key_str, "value": value})
            tx.after_commit(lambda: self.injected.append(value))
        return outcome


@pytest.fixture
def sessions(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    effects_md.create_all(engine)
    return session_factory(engine)


def make_runtime(sessions: Any, handler: Any, fake: FakeConsumer, **cfg: Any) -> ConsumerRuntime:
    inflight = cfg.pop("inflight", None)
    config = RuntimeConfig(
        bootstrap="fake:0",
        group_id="g",
        topics=("t",),
        retry=cfg.pop("retry", BackoffPolicy(base_s=0.0, max_attempts=3, jitter=0)),
        **cfg,
    )
    return ConsumerRuntime(
        config,
        handler=handler,
        sessions=sessions,
        dead_letters=ListSink(),
        consumer_factory=lambda _conf: fake,
        inflight=inflight,
    )


def produce_ids(fake: FakeConsumer, n: int) -> None:
    """``n`` records on t/0, values v0.., msgIds m0.."""
    for i in range(n):
        fake.produce("t", 0, b"k", f"v{i}".encode(), [("msgId", f"m{i}".encode())])


def effect_values(sessions: Any) -> list[str]:
    with sessions() as s:
        return [r.value for r in s.execute(select(effects).order_by(effects.c.id))]


def test_effects_and_dedupe_rows_commit_together_then_offsets(sessions: Any) -> None:
    fake = FakeConsumer()
    produce_ids(fake, 5)
    handler = Script()
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert effect_values(sessions) == [f"v{i}" for i in range(5)]
    assert fake.committed == {("t", 0): 5}
    assert handler.injected == [f"v{i}" for i in range(5)]


def test_redelivery_after_crash_is_absorbed_by_dedupe(sessions: Any) -> None:
    """R-FAIL-1: the offset is committed only after the batch; dedupe skips."""
    fake = FakeConsumer()
    produce_ids(fake, 3)
    rt = make_runtime(sessions, Script(), fake)
    fake.fail_commits = KafkaError(KafkaError.REQUEST_TIMED_OUT)  # crash "between" tx and commit
    rt.step()
    assert fake.committed == {}
    fake.fail_commits = None
    fake.position[("t", 0)] = 0  # the replacement consumer starts at the committed offset
    handler2 = Script()
    rt2 = make_runtime(sessions, handler2, fake)
    rt2.step()
    assert handler2.calls == [], "every record was already applied: none reaches the handler"
    assert effect_values(sessions) == ["v0", "v1", "v2"]
    assert fake.committed == {("t", 0): 3}


def test_commit_failure_runs_no_after_commit_effect(sessions: Any) -> None:
    """Forward path: on any commit error, inject nothing (R-ACK-3)."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    handler = Script()
    fake.fail_commits = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    make_runtime(sessions, handler, fake).step()
    assert handler.injected == []


def test_fencing_stops_the_member_loudly_and_injects_nothing(sessions: Any) -> None:
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    handler = Script()
    fake.fail_commits = KafkaError(KafkaError.FENCED_INSTANCE_ID)
    rt = make_runtime(sessions, handler, fake, instance_id="hostA")
    with pytest.raises(FencedError, match="fenced"):
        rt.step()
    assert handler.injected == []


def _static_member_with_a_brief(
    sessions: Any, instance_id: str
) -> tuple[ConsumerRuntime, FakeConsumer, Script, list[dict[str, Any]]]:
    """A subscribed static member over a fake client holding one brief; ``confs`` lists the
    configuration of every client it built (a re-join builds a fresh one)."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    confs: list[dict[str, Any]] = []

    def factory(conf: dict[str, Any]) -> FakeConsumer:
        confs.append(conf)
        return fake

    handler = Script()
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap="fake:0", group_id="g", topics=("t",), instance_id=instance_id),
        handler=handler,
        sessions=sessions,
        dead_letters=ListSink(),
        consumer_factory=factory,
    )
    rt.subscribe()
    return rt, fake, handler, confs


def test_fenced_right_after_its_own_session_timeout_rejoins_once_with_a_fresh_client(
    sessions: Any,
) -> None:
    """librdkafka #3437, seen after a whole-cluster outage: a static member that timed
    out its own session re-joins under a new member id and is fenced as the old one. That member
    joins again with a fresh client; the next fencing without a session timeout stops it."""
    rt, fake, handler, confs = _static_member_with_a_brief(sessions, "hostA")
    confs[0]["logger"].log(4, "%s [%s] %s", "SESSTMOUT", "rdkafka#consumer-1", "timed out")
    fake.fail_commits = KafkaError(KafkaError.FENCED_INSTANCE_ID)
    rt.step()  # fenced by itself: no exception
    assert len(confs) == 2, "a fresh client joined"
    assert confs[1]["group.instance.id"] == "hostA"
    assert handler.injected == [], "nothing is injected through a fenced commit"
    fake.produce("t", 0, b"k", b"brief2", [("msgId", b"m2")])
    with pytest.raises(FencedError, match="fenced"):
        rt.step()  # fenced again, no session timeout of its own: a real second member
    assert len(confs) == 2


def test_the_dropped_clients_late_fencing_does_not_stop_the_rejoined_member(
    sessions: Any,
) -> None:
    """The ``paused-leader`` chaos scenario: fenced right after its own session timeout, gateway A re-joined
    with a fresh client -- and 0.15 s later stopped [FENCED] on a refused asynchronous commit of
    the client it had just dropped (served while that client closed). Results of the dropped
    client are dropped with it; the fresh client's own fencing still stops the member."""
    from confluent_kafka import TopicPartition

    rt, fake, _handler, confs = _static_member_with_a_brief(sessions, "hostA")
    rt.step()  # the brief: committed, injected
    refused = KafkaError(KafkaError.FENCED_INSTANCE_ID)
    real_close = fake.close

    def close_serving_a_late_result() -> None:  # librdkafka serves callbacks while closing
        rt.async_commits.on_commit(refused, [TopicPartition("t", 0, 1)])
        real_close()

    fake.close = close_serving_a_late_result  # type: ignore[method-assign]
    confs[0]["logger"].log(4, "%s [%s] %s", "SESSTMOUT", "rdkafka#consumer-1", "timed out")
    rt.async_commits.on_commit(refused, [TopicPartition("t", 0, 1)])
    rt.step()  # fenced by itself: a fresh client
    assert len(confs) == 2
    fake.close = real_close  # type: ignore[method-assign]
    rt.step()  # the dropped client's late refusal: no exception
    rt.async_commits.on_commit(refused, [TopicPartition("t", 0, 1)])
    with pytest.raises(FencedError, match="asynchronous offset commit"):
        rt.step()  # the fresh client fenced, no session timeout of its own: a second member


def test_fenced_after_its_client_rejoined_on_its_own_is_fenced_by_itself(
    sessions: Any,
) -> None:
    """The ``broker-down`` chaos scenario: a synchronous commit blocked through a 68 s outage; meanwhile
    librdkafka timed out the session and re-joined under a new member id, and the commit came
    back FENCED_INSTANCE_ID -- but the client's SESSTMOUT line was still waiting to be served by
    a poll, so the gateway stopped [FENCED] with no second gateway anywhere. A member id that
    moved since the last assignment is the client's own re-join; an unchanged one (a second
    member with our id: measured on a real broker) still stops the member."""
    from confluent_kafka import TopicPartition

    rt, fake, handler, confs = _static_member_with_a_brief(sessions, "hostB")
    fake.member_id = "hostB-1"
    rt.rebalance.on_assign(fake, [TopicPartition("t", 0)])
    fake.member_id = "hostB-2"  # librdkafka re-joined on its own; no SESSTMOUT served yet
    fake.fail_commits = KafkaError(KafkaError.FENCED_INSTANCE_ID)
    rt.step()  # fenced by itself: no exception
    assert len(confs) == 2 and handler.injected == []

    # a broker away longer than session timeout + 30 s: the client dropped its member id to
    # re-join (memberid() None) and its SESSTMOUT line is too old to excuse anything
    rt.rebalance.on_assign(fake, [TopicPartition("t", 0)])  # the fresh client's assignment: hostB-2
    fake.member_id = None
    fake.produce("t", 0, b"k", b"brief2", [("msgId", b"m2")])
    rt.step()  # fenced by itself again: no exception
    assert len(confs) == 3 and handler.injected == []

    fake.member_id = "hostB-3"
    rt.rebalance.on_assign(fake, [TopicPartition("t", 0)])
    fake.produce("t", 0, b"k", b"brief3", [("msgId", b"m3")])
    with pytest.raises(FencedError, match="fenced"):
        rt.step()  # fenced, member id unchanged: a real second member
    assert len(confs) == 3 and handler.injected == []


def test_retry_pauses_only_its_partition_and_keeps_order(sessions: Any) -> None:
    """R-RETRY-2: retry with backoff without blocking other partitions."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"a1", [("msgId", b"a1")])
    fake.produce("t", 0, b"a", b"a2", [("msgId", b"a2")])
    fake.produce("t", 1, b"b", b"b1", [("msgId", b"b1")])
    handler = Script({"a1": [Retry(delay_s=0.0)]})
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert effect_values(sessions) == ["b1"]
    # t0 stays at a1 (committed again there, with a1's attempts as its metadata: retry_marks)
    assert fake.committed == {("t", 1): 1, ("t", 0): 0}
    assert ("t", 0) in fake.paused
    rt.step()  # resume due (delay 0), a1 now succeeds, then a2 — in order
    assert effect_values(sessions) == ["b1", "a1", "a2"]
    assert fake.committed[("t", 0)] == 2


def test_spent_retry_budget_dead_letters_and_moves_on(sessions: Any) -> None:
    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"poison", [("msgId", b"p")])
    fake.produce("t", 0, b"a", b"after", [("msgId", b"q")])
    handler = Script({"poison": [Retry(delay_s=0.0)] * 10})
    rt = make_runtime(sessions, handler, fake, ordered=False)
    for _ in range(5):
        rt.step()
    sink = rt.dead_letters
    assert isinstance(sink, ListSink)
    assert [(r.value, reason, n) for r, reason, n in sink.letters] == [
        (b"poison", "RETRIES_EXHAUSTED", 3)
    ]
    assert effect_values(sessions) == ["after"]
    assert fake.committed[("t", 0)] == 2


def test_dead_letter_gets_no_dedupe_row_so_replay_can_apply_it(sessions: Any) -> None:
    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"bad", [("msgId", b"x")])
    rt = make_runtime(sessions, Script({"bad": [DeadLetter(reason="SIG_INVALID")]}), fake)
    rt.step()
    fake.produce("t", 0, b"a", b"bad", [("msgId", b"x")])  # the DLQ replay, same msgId
    rt.step()
    assert effect_values(sessions) == ["bad"]


def test_handler_exception_maps_to_retry_then_dead_letter(sessions: Any) -> None:
    class Boom:
        def handle(self, record: Record, tx: Staged) -> Outcome:
            raise RuntimeError("boom")

    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"v", [("msgId", b"m")])
    rt = make_runtime(sessions, Boom(), fake, ordered=False)
    for _ in range(4):
        rt.step()
    sink = rt.dead_letters
    assert isinstance(sink, ListSink) and len(sink.letters) == 1
    with sessions() as s:
        assert s.execute(select(func.count()).select_from(effects)).scalar() == 0


def test_a_failed_dedupe_claim_backs_the_batch_off_instead_of_escaping(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store error in the dedupe claim (the insert-or-ignore that opens the batch
    transaction) must not stop the inbox thread; the batch is re-read after a
    backoff, exactly like a failed batch transaction."""
    from sqlalchemy.exc import OperationalError

    from pipeline.runtime import loop

    fake = FakeConsumer()
    produce_ids(fake, 3)
    handler = Script()
    rt = make_runtime(sessions, handler, fake)
    real = loop.claim_ids

    def down(*_a: Any, **_k: Any) -> set[str]:
        raise OperationalError("INSERT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(loop, "claim_ids", down)
    rt.step()  # does not raise
    assert handler.calls == [] and fake.committed == {}
    assert rt.pauses.paused, "the partition waits for the backoff"
    monkeypatch.setattr(loop, "claim_ids", real)
    rt.pauses.paused = {tp: 0.0 for tp in rt.pauses.paused}  # the backoff is over
    rt.step()
    rt.step()
    assert effect_values(sessions) == ["v0", "v1", "v2"]
    assert fake.committed == {("t", 0): 3}


class VerifyingScript(Script):
    """A handler with a verify stage: msgIds in ``forged`` fail it."""

    def __init__(self, forged: set[str]) -> None:
        super().__init__()
        self.forged = forged

    def verify(self, record: Record) -> DeadLetter | None:
        if record.header_str("msgId") in self.forged and record.value == b"tampered":
            return DeadLetter(reason="SIG_INVALID", error="tampered")
        return None


def test_a_duplicate_msg_id_is_verified_before_it_is_dropped(sessions: Any) -> None:
    """R-ENV-3: only a record that verifies may be dropped as a duplicate."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    handler = VerifyingScript({"m0"})
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    fake.produce("t", 0, b"k", b"tampered", [("msgId", b"m0")])
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    rt.step()
    sink = rt.dead_letters
    assert isinstance(sink, ListSink)
    assert [(r.value, reason) for r, reason, _n in sink.letters] == [(b"tampered", "SIG_INVALID")]
    assert effect_values(sessions) == ["v0"]  # the exact redelivery was dropped
    assert fake.committed == {("t", 0): 3}


class FlakyQuarantine:
    """A quarantine port whose state read fails ``fail`` times (the store is away)."""

    def __init__(self, fail: int) -> None:
        self.fail = fail

    def refresh(self, scope: str) -> None:
        from sqlalchemy.exc import OperationalError

        if self.fail:
            self.fail -= 1
            raise OperationalError("SELECT", {}, Exception("store away"))

    def is_quarantined(self, scope: str, key: str) -> bool:
        return False

    def pending_releases(self, scope: str) -> list[str]:
        return []


def test_a_failed_quarantine_refresh_holds_every_partition_until_it_works(sessions: Any) -> None:
    """The on-assign quarantine read may fail; no record may be handled on a stale
    cache (a key the previous owner quarantined), and the member must not crash."""
    from confluent_kafka import TopicPartition

    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    handler = Script()
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap="fake:0", group_id="g", topics=("t",)),
        handler=handler,
        sessions=sessions,
        dead_letters=ListSink(),
        quarantine=FlakyQuarantine(fail=2),  # type: ignore[arg-type]
        consumer_factory=lambda _conf: fake,
    )
    rt.rebalance.on_assign(None, [TopicPartition("t", 0)])  # the refresh fails: everything paused
    assert ("t", 0) in fake.paused
    rt.step()  # the refresh fails again: still nothing handled
    assert handler.calls == []
    rt.step()  # the refresh works: resumed, and (next step) handled
    rt.step()
    assert effect_values(sessions) == ["v0"] and fake.committed == {("t", 0): 1}


class Pull:
    """A pull-path handler: its writes are staged, its bookkeeping is ``after_store``
    -- nothing waits for the offset commit."""

    def __init__(self, forward: set[str] | None = None) -> None:
        self.forward = forward or set()  # values delivered the forward way (after_commit)
        self.stored: list[str] = []
        self.injected: list[tuple[str, dict[tuple[str, int], int], str]] = []
        self.fake: FakeConsumer | None = None

    def handle(self, record: Record, tx: Staged) -> Outcome:
        value = (record.value or b"").decode()
        tx.insert(effects, {"key": record.key_str, "value": value})
        tx.after_store(lambda: self.stored.append(value))
        if value in self.forward:
            fake = self.fake
            assert fake is not None
            # what the broker holds, and how it got there, at the moment of the inject
            tx.after_commit(
                lambda: self.injected.append((value, dict(fake.committed), fake.commit_modes[-1]))
            )
        return ACK


def _pull_runtime(
    sessions: Any, values: list[str], forward: set[str], **cfg: Any
) -> tuple[Any, Any, Pull]:
    fake = FakeConsumer()
    for i, v in enumerate(values):
        fake.produce("t", 0, b"k", v.encode(), [("msgId", f"m-{v}-{i}".encode())])
    handler = Pull(forward)
    handler.fake = fake
    rt = make_runtime(sessions, handler, fake, **cfg)
    if cfg.get("pipelined_commit"):  # the commits' answers served, as its real client would
        fake.conf["on_commit"] = rt._on_commit
    return rt, fake, handler


def test_a_pull_batch_commits_async_and_a_forward_batch_commits_sync_before_its_inject(
    sessions: Any,
) -> None:
    """R-ACK-7 / R-ACK-2: the pull path may commit its offsets asynchronously (a lost
    commit redelivers, dedupe absorbs it); the forward path keeps "commit before inject". Which
    one a batch gets follows from the follow-ups staged (``AfterStore`` vs ``AfterCommit``), not
    from a flag: one forward record makes its whole batch commit synchronously first."""
    rt, fake, handler = _pull_runtime(sessions, ["p0", "p1"], forward=set())
    rt.step()
    assert fake.commit_modes == ["async"]
    assert fake.committed == {("t", 0): 2} and handler.stored == ["p0", "p1"]

    rt, fake, handler = _pull_runtime(sessions, ["p2", "brief", "p3"], forward={"brief"})
    rt.step()
    assert fake.commit_modes == ["sync"]
    assert handler.injected == [("brief", {("t", 0): 3}, "sync")], "committed, then injected"


def test_a_failed_sync_commit_runs_after_store_bookkeeping_but_never_the_inject(
    sessions: Any,
) -> None:
    """The batch transaction committed, so its bookkeeping (seen-set, counters) holds; the
    at-most-once inject does not run without a confirmed offset commit (R-ACK-3)."""
    rt, fake, handler = _pull_runtime(sessions, ["p0", "brief"], forward={"brief"})
    fake.fail_commits = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    rt.step()
    assert handler.stored == ["p0", "brief"]
    assert handler.injected == []


def test_staged_follow_ups_are_a_closed_type_that_decides_the_commit() -> None:
    from pipeline.runtime.staging import AckMode, AfterCommit, AfterStore

    tx = Staged()
    assert tx.ack_mode() is AckMode.AT_LEAST_ONCE
    tx.after_store(lambda: None)
    assert tx.ack_mode() is AckMode.AT_LEAST_ONCE
    mark = tx.mark()
    tx.after_commit(lambda: None)
    assert tx.ack_mode() is AckMode.AT_MOST_ONCE
    assert [type(e) for e in tx.effects] == [AfterStore, AfterCommit]
    tx.rollback(mark)  # a record that was not applied takes its inject with it
    assert tx.ack_mode() is AckMode.AT_LEAST_ONCE


def test_after_store_each_runs_each_run_of_items_as_one_call_in_staging_order() -> None:
    from pipeline.runtime.staging import AckMode

    calls: list[object] = []
    tx = Staged()
    tx.after_store_each(calls.append, "a")
    tx.after_store_each(calls.append, "b")
    tx.after_store(lambda: calls.append("store"))
    tx.after_store_each(calls.append, "c")
    mark = tx.mark()
    tx.after_store_each(calls.append, "rolled back")
    tx.rollback(mark)
    tx.after_commit(lambda: calls.append("commit"))
    assert tx.ack_mode() is AckMode.AT_MOST_ONCE
    tx.run_effects(committed=False, on_error=lambda: calls.append("error"))
    assert calls == [["a", "b"], "store", ["c"]], "no AfterCommit without the commit"
    calls.clear()
    failing = Staged()
    failing.after_store_each(lambda items: 1 / 0, "x")
    failing.after_store(lambda: calls.append("after"))
    failing.run_effects(committed=True, on_error=lambda: calls.append("error"))
    assert calls == ["error", "after"], "a failed batch of items never stops the others"


def test_an_async_commit_refused_for_fencing_stops_the_member_at_the_next_step(
    sessions: Any,
) -> None:
    """An async commit's result arrives through ``on_commit``; a fenced static member still
    stops loudly (the forward path would have raised at its sync commit)."""
    rt = _static_member_with_a_refused_async_commit(sessions, KafkaError.FENCED_INSTANCE_ID)
    with pytest.raises(FencedError, match="asynchronous offset commit"):
        rt.step()


def _static_member_with_a_refused_async_commit(sessions: Any, code: int) -> Any:
    """A static pull-path member that ran one batch, whose asynchronous commit came back
    refused with ``code`` (librdkafka's ``on_commit``)."""
    from confluent_kafka import TopicPartition

    rt, _fake, _handler = _pull_runtime(sessions, ["p0"], forward=set())
    rt.config = RuntimeConfig(**{**rt.config.__dict__, "instance_id": "m01"})
    rt.async_commits.static_member = True
    rt.step()
    rt.async_commits.on_commit(KafkaError(code), [TopicPartition("t", 0, 1)])
    return rt


def test_a_static_member_with_a_stale_generation_is_rebalancing_not_fenced(
    sessions: Any,
) -> None:
    """R-POOL-6 (partitions as concurrency with static membership): a static member whose commit
    meets ILLEGAL_GENERATION (another member's join moved the generation on; seen in the lab with
    static cooperative-sticky members rejoining after an outage) keeps running and commits again;
    FENCED_INSTANCE_ID (a second member holds its id) still stops it, on both commit paths."""
    from confluent_kafka import TopicPartition

    rt = _static_member_with_a_refused_async_commit(sessions, KafkaError.ILLEGAL_GENERATION)
    rt.step()  # no FencedError: the offsets go again after RETRY_S
    assert rt.async_commits.sent, "the refused offsets are kept for the next commit"
    rt.async_commits.on_commit(
        KafkaError(KafkaError.FENCED_INSTANCE_ID), [TopicPartition("t", 0, 1)]
    )
    with pytest.raises(FencedError, match="asynchronous offset commit"):
        rt.step()

    # the forward path's synchronous commit: nothing injected either way; only fencing raises
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    handler = Script()
    fake.fail_commits = KafkaError(KafkaError.ILLEGAL_GENERATION)
    rt = make_runtime(sessions, handler, fake, instance_id="m01")
    rt.step()
    assert handler.injected == []
    fake.produce("t", 0, b"k", b"brief2", [("msgId", b"m2")])
    fake.fail_commits = KafkaError(KafkaError.FENCED_INSTANCE_ID)
    with pytest.raises(FencedError, match="fenced"):
        rt.step()
    assert handler.injected == []


def test_a_static_member_whose_session_expired_rejoins_instead_of_stopping(
    sessions: Any,
) -> None:
    """R-ACK-3 (commit before inject) across a network cut (the ``cut-off`` chaos scenario: a static
    member cut off past its session timeout is removed from the group, and the commit it had in
    flight comes back UNKNOWN_MEMBER_ID -- nobody holds its instance id (a second member would
    make it FENCED_INSTANCE_ID). That is a lost session, not fencing: the batch's briefs are not
    injected (the commit failed: the sender's deadline answers them with one FAILED), and the
    member keeps running -- the next batch is committed and injected. On the pull path the
    refused async commit goes again."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    handler = Script()
    fake.fail_commits = KafkaError(KafkaError.UNKNOWN_MEMBER_ID)
    rt = make_runtime(sessions, handler, fake, instance_id="B")
    rt.step()  # no FencedError
    assert handler.injected == [], "nothing is injected through a failed commit"
    fake.fail_commits = None
    fake.produce("t", 0, b"k", b"brief2", [("msgId", b"m2")])
    rt.step()
    assert handler.injected == ["brief2"] and fake.committed == {("t", 0): 2}

    rt = _static_member_with_a_refused_async_commit(sessions, KafkaError.UNKNOWN_MEMBER_ID)
    rt.step()  # no FencedError: the offsets go again after RETRY_S
    assert rt.async_commits.sent, "the refused offsets are kept for the next commit"


def test_revoke_commits_the_pull_paths_last_offsets_synchronously(sessions: Any) -> None:
    from confluent_kafka import TopicPartition

    rt, fake, _handler = _pull_runtime(sessions, ["p0", "p1"], forward=set())
    fake.fail_commits = KafkaError(KafkaError.REQUEST_TIMED_OUT)  # the async commit is lost
    rt.step()
    assert fake.committed == {}
    fake.fail_commits = None
    rt.rebalance.on_revoke(fake, [TopicPartition("t", 0)])
    assert fake.committed == {("t", 0): 2} and fake.commit_modes[-1] == "sync"


def test_a_duplicate_in_one_batch_and_a_parked_record_claim_no_dedupe_row(sessions: Any) -> None:
    """The dedupe claim (insert-or-ignore at the start of the batch transaction) is released
    for every record that was not applied, so a replay or a release can still apply it."""
    from pipeline.runtime.dedupe import seen_ids

    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    fake.produce("t", 0, b"k", b"v0-again", [("msgId", b"m0")])
    fake.produce("t", 0, b"k", b"bad", [("msgId", b"m1")])
    handler = Script({"bad": [DeadLetter(reason="SCHEMA_INVALID", error="x")]})
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert effect_values(sessions) == ["v0"]
    with sessions() as s:
        assert seen_ids(s, "g", ["m0", "m1"]) == {"m0"}
    assert fake.committed == {("t", 0): 3}


def test_the_store_is_warmed_before_the_first_poll_and_the_warm_up_writes_nothing(
    sessions: Any,
) -> None:
    """No first-batch stall -- the dedupe claim and the handler's writes are
    compiled in a rolled-back transaction at subscribe, before any record is read."""
    from pipeline.runtime.dedupe import seen_ids
    from pipeline.runtime.ports import WARM_UP_ID

    class Warm(Script):
        warmed = 0

        def warm(self, session: Any) -> None:
            self.warmed += 1
            tx = Staged()
            tx.insert(effects, {"key": "warm", "value": "warm"})
            tx.flush(session)

    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    handler = Warm()
    rt = make_runtime(sessions, handler, fake)
    rt.subscribe()
    rt.subscribe()  # a re-join does not warm again
    assert handler.warmed == 1 and handler.calls == []
    assert effect_values(sessions) == []
    with sessions() as s:
        assert seen_ids(s, "g", [WARM_UP_ID]) == set()
    rt.step()
    assert effect_values(sessions) == ["v0"]


@pytest.mark.parametrize(
    ("plant", "window"),
    [("commit_before_transaction", "committed_before_transaction"),
     ("dedupe_own_transaction", "dedupe_committed_alone")],
)  # fmt: skip
def test_a_planted_bug_opens_its_window_in_the_claiming_batch(
    sessions: Any, plant: str, window: str
) -> None:
    """The chaos suite's planted bugs (pipeline/hooks.py) still open their windows with the
    dedupe claimed in the batch transaction: at the crash point the offsets (or the dedupe
    rows) are committed and the effects are not."""
    from pipeline.hooks import Hooks
    from pipeline.runtime.dedupe import seen_ids
    from pipeline.store import read_sessions

    seen: list[tuple[str, dict[tuple[str, int], int], list[str], set[str]]] = []

    reads = read_sessions(sessions.kw["bind"])  # the batch transaction holds the write lock

    def crash(name: str) -> None:
        with reads() as s:
            ids = seen_ids(s, "g", ["m0"])
            values = [r.value for r in s.execute(select(effects))]
        seen.append((name, dict(fake.committed), values, ids))

    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"v0", [("msgId", b"m0")])
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap="fake:0", group_id="g", topics=("t",)),
        handler=Script(),
        sessions=sessions,
        dead_letters=ListSink(),
        consumer_factory=lambda _conf: fake,
        hooks=Hooks(crash=crash, **{plant: True}),
    )
    rt.step()
    if plant == "commit_before_transaction":
        assert seen == [(window, {("t", 0): 1}, [], set())], "offsets first, no rows yet"
    else:
        assert seen == [(window, {}, [], {"m0"})], "the dedupe row alone, no effect yet"
    assert effect_values(sessions) == ["v0"]  # no crash here: the batch completes


class SeekCounting(FakeConsumer):
    def __init__(self) -> None:
        super().__init__()
        self.seeks: list[tuple[str, int, int]] = []

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))
        super().seek(tp)


class Steps(Script):
    """A pool-style handler: ``run`` on a worker thread, then ``handle`` (scripted)."""

    def __init__(self, outcomes: dict[str, list[Outcome]]) -> None:
        super().__init__(outcomes)
        self.ran: list[str] = []

    def run(self, record: Record) -> None:
        self.ran.append((record.value or b"").decode())


def test_a_pool_retry_keeps_its_records_in_memory_and_never_seeks_back(sessions: Any) -> None:
    """R-RETRY-4 in a worker pool: the retried record and the ones behind it wait in
    memory for the backoff and run again in order; the consumer is never sought back (a re-read
    waits out a fresh fetch), and the partition's offset is committed only past them."""
    from pipeline.runtime.inflight import Dispatcher, InflightConfig

    fake = SeekCounting()
    for v in ("a1", "a2", "a3"):
        fake.produce("t", 0, b"a", v.encode(), [("msgId", v.encode())])
    fake.produce("t", 1, b"b", b"b1", [("msgId", b"b1")])
    handler = Steps({"a1": [Retry(delay_s=0.0)]})
    config = RuntimeConfig(
        bootstrap="fake:0",
        group_id="g",
        topics=("t",),
        retry=BackoffPolicy(base_s=0.0, max_attempts=3, jitter=0),
    )
    rt = ConsumerRuntime(
        config,
        handler=handler,
        sessions=sessions,
        dead_letters=ListSink(),
        consumer_factory=lambda _conf: fake,
        inflight=Dispatcher(InflightConfig(max_records=10, depth=5), handler),
    )
    for _ in range(400):
        rt.step()
        if len(effect_values(sessions)) == 4:
            break
    assert fake.seeks == []
    assert [v for v in effect_values(sessions) if v.startswith("a")] == ["a1", "a2", "a3"]
    assert handler.ran.count("a1") == 2  # the failed attempt and the retry
    rt.step()
    assert fake.committed[("t", 0)] == 3


class HeldSteps(Steps):
    """Steps that run until the test releases them."""

    def __init__(self) -> None:
        super().__init__({})
        self.release = threading.Event()

    def run(self, record: Record) -> None:
        self.release.wait(5)
        super().run(record)


def test_a_backlog_on_every_partition_starts_a_step_on_every_partition(sessions: Any) -> None:
    """R-POOL-1 (partitions as concurrency): with a backlog on every partition a pool member
    runs a step on each of them. The consumer hands a backlog out a partition at a time (as
    librdkafka does: one ``consume(50)`` returned 50 records of one partition), so the member
    takes records one by one and pauses a partition once it holds its buffer's worth; before,
    the first partitions took the member's whole record bound and the last sat idle."""
    from pipeline.runtime.inflight import Dispatcher, InflightConfig

    fake = FakeConsumer()
    for p in range(4):
        for i in range(20):
            fake.produce("t", p, b"k%d" % p, b"p%d-%d" % (p, i), [("msgId", b"p%d-%d" % (p, i))])
    handler = HeldSteps()
    dispatcher = Dispatcher(InflightConfig(max_records=50, depth=2), handler)
    rt = make_runtime(sessions, handler, fake, inflight=dispatcher)
    try:
        rt.step()
        assert {r.partition for r in dispatcher.lanes.running()} == {0, 1, 2, 3}
        assert [dispatcher.lanes.held(("t", p)) for p in range(4)] == [2, 2, 2, 2]
        assert fake.paused == {("t", p) for p in range(4)}
    finally:
        handler.release.set()
        dispatcher.close()


def test_a_commit_refused_while_the_coordinator_moves_is_tried_again_then_the_brief_injected(
    sessions: Any,
) -> None:
    """The ``rolling-restart`` chaos scenario (a clean rolling restart): the forward batch's commit came back
    COORDINATOR_LOAD_IN_PROGRESS, its inject was skipped, and the brief ended as one FAILED
    INJECT_TIMEOUT. Refused before it was applied, the same commit is tried again; the inject
    still follows a confirmed commit (R-ACK-3)."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"k", b"brief", [("msgId", b"m1")])
    handler = Script()
    fake.fail_commits = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    commit = fake.commit

    def coordinator_back_on_the_third(offsets: Any = None, asynchronous: bool = True) -> Any:
        if fake.commit_calls == 2:
            fake.fail_commits = None
        return commit(offsets, asynchronous)

    fake.commit = coordinator_back_on_the_third  # type: ignore[method-assign]
    make_runtime(sessions, handler, fake).step()
    assert fake.commit_modes == ["sync", "sync", "sync"]
    assert fake.committed == {("t", 0): 1}
    assert handler.injected == ["brief"]


@pytest.mark.parametrize(
    ("code", "tried_again"),
    [
        (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, True),
        (KafkaError.NOT_COORDINATOR, True),
        (KafkaError.REQUEST_TIMED_OUT, False),  # may have been applied: not the same commit
        (KafkaError.REBALANCE_IN_PROGRESS, False),  # the partitions may be moving away
        (KafkaError.FENCED_INSTANCE_ID, False),
    ],
)
def test_only_a_moving_coordinator_is_waited_out_and_only_within_the_budget(
    code: int, tried_again: bool
) -> None:
    from pipeline.runtime.commits import commit_while_coordinator_moves

    fake = FakeConsumer()
    fake.fail_commits = KafkaError(code)
    waits: list[float] = []
    result, retries = commit_while_coordinator_moves(
        fake, {("t", 0): 1}, budget_s=1.0, wait=lambda s: bool(waits.append(s))
    )
    assert not result.ok and fake.committed == {}
    assert (retries > 0) is tried_again
    assert sum(waits) <= 1.0 and waits == sorted(waits)  # bounded, backing off
    stopped, _ = commit_while_coordinator_moves(fake, {("t", 0): 1}, wait=lambda s: True)
    assert not stopped.ok
    assert fake.commit_calls == retries + 2  # a stop ends the waiting at once


def test_a_handler_s_read_ahead_runs_in_the_batch_transaction_before_the_dedupe_claim(
    sessions: Any,
) -> None:
    """``ReadsAhead``: the batch read runs in the batch's transaction, before its dedupe claim
    (so on PostgreSQL it can go in the claim's round trip, ``pg_pipeline.lead``), once per
    batch, and the records are decided after it."""
    from pipeline.runtime.dedupe import dedupe_table

    class Ahead(Script):
        def __init__(self) -> None:
            super().__init__()
            self.claimed_before: list[int] = []

        def read_ahead(self, tx: Any, records: Any) -> None:
            self.calls.append(f"ahead:{len(records)}")
            got = tx.connection().execute(select(func.count()).select_from(dedupe_table))
            self.claimed_before.append(int(got.scalar_one()))

    fake = FakeConsumer()
    produce_ids(fake, 3)
    handler = Ahead()
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert handler.calls == ["ahead:3", "v0", "v1", "v2"]
    assert handler.claimed_before == [0], "read before this batch's claim"
    assert effect_values(sessions) == ["v0", "v1", "v2"]
