"""The runtime's per-batch contract, on FakeConsumer + a real SQLite store (no broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pipeline.failures.context import FailureContext
from pipeline.failures.outcomes import ACK, DeadLetter, Outcome, Retry
from pipeline.failures.retry import BackoffPolicy
from pipeline.runtime import ConsumerRuntime, FencedError, Record, RuntimeConfig, Staged
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
    )


def effect_values(sessions: Any) -> list[str]:
    with sessions() as s:
        return [r.value for r in s.execute(select(effects).order_by(effects.c.id))]


def test_effects_and_dedupe_rows_commit_together_then_offsets(sessions: Any) -> None:
    fake = FakeConsumer()
    for i in range(5):
        fake.produce("t", 0, b"k", f"v{i}".encode(), [("msgId", f"m{i}".encode())])
    handler = Script()
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert effect_values(sessions) == [f"v{i}" for i in range(5)]
    assert fake.committed == {("t", 0): 5}
    assert handler.injected == [f"v{i}" for i in range(5)]


def test_redelivery_after_crash_is_absorbed_by_dedupe(sessions: Any) -> None:
    """Seed 001 scenario 1: the offset is committed only after the batch; dedupe skips."""
    fake = FakeConsumer()
    for i in range(3):
        fake.produce("t", 0, b"k", f"v{i}".encode(), [("msgId", f"m{i}".encode())])
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
    """Forward path: on any commit error, inject nothing (seed 000 §6)."""
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


def test_retry_pauses_only_its_partition_and_keeps_order(sessions: Any) -> None:
    """Seed 001 scenario 3: retry with backoff without blocking other partitions."""
    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"a1", [("msgId", b"a1")])
    fake.produce("t", 0, b"a", b"a2", [("msgId", b"a2")])
    fake.produce("t", 1, b"b", b"b1", [("msgId", b"b1")])
    handler = Script({"a1": [Retry(delay_s=0.0)]})
    rt = make_runtime(sessions, handler, fake)
    rt.step()
    assert effect_values(sessions) == ["b1"]
    assert fake.committed == {("t", 1): 1}
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
