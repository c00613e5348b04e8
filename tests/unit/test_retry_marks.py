"""A retried record's attempts travel with its partition's committed offset (R-RETRY-3,
R-FAIL-3: a retry limit with backoff, held for the group: the ``poison-rebalance`` chaos scenario found a poison record
retried 9 and 13 times against a limit of 5 when its partition moved between members)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from pipeline.runtime import ConsumerRuntime, RuntimeConfig, retry_marks
from pipeline.runtime.commits import AsyncCommits
from pipeline.runtime.context import Tries
from pipeline.runtime.outcomes import Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import make_engine, session_factory
from pipeline.testing import FakeConsumer
from tests.unit.test_runtime import ListSink, Script, effects_md


def test_a_mark_round_trips_and_anything_else_is_no_mark() -> None:
    tries = Tries(attempts=4, first_failure_ms=1_000, last_failure_ms=9_000)
    mark = retry_marks.encode(17, tries)
    assert retry_marks.decode(mark) == (17, tries)
    for other in (None, "", "note from another tool", "fleet.retry:1:2:3", mark + ":x"):
        assert retry_marks.decode(other) is None


class Marking(FakeConsumer):
    """Keeps the metadata of every committed partition."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata: dict[tuple[str, int], str | None] = {}

    def commit(self, offsets: list[Any] | None = None, asynchronous: bool = True) -> Any:
        for tp in offsets or []:
            self.metadata[(tp.topic, tp.partition)] = tp.metadata
        return super().commit(offsets, asynchronous)


@pytest.fixture
def sessions(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    effects_md.create_all(engine)
    return session_factory(engine)


def _runtime(sessions: Any, handler: Any, fake: FakeConsumer) -> ConsumerRuntime:
    config = RuntimeConfig(
        bootstrap="fake:0",
        group_id="g",
        topics=("t",),
        retry=BackoffPolicy(base_s=0.0, max_attempts=3, jitter=0),
        ordered=False,
    )
    return ConsumerRuntime(
        config,
        handler=handler,
        sessions=sessions,
        dead_letters=ListSink(),
        consumer_factory=lambda _conf: fake,
    )


def test_a_retry_commits_its_attempts_with_the_blocked_offset_and_the_next_commit_clears_them(
    sessions: Any,
) -> None:
    fake = Marking()
    fake.produce("t", 0, b"a", b"ok", [("msgId", b"m0")])
    fake.produce("t", 0, b"a", b"poison", [("msgId", b"m1")])
    rt = _runtime(sessions, Script({"poison": [Retry(delay_s=0.0)]}), fake)
    rt.step()  # ok applied, poison retried: the commit stops at the poison, with its mark
    assert fake.committed[("t", 0)] == 1
    got = retry_marks.decode(fake.metadata[("t", 0)])
    assert got is not None and got[0] == 1 and got[1]["attempts"] == 1
    rt.step()  # the retry succeeds: committed past it, no mark left
    assert fake.committed[("t", 0)] == 2
    assert fake.metadata[("t", 0)] is None


def test_a_new_owner_continues_the_count_and_dead_letters_at_the_groups_budget(
    sessions: Any,
) -> None:
    fake = FakeConsumer()
    fake.produce("t", 0, b"a", b"poison", [("msgId", b"p")])
    rt = _runtime(sessions, Script({"poison": [Retry(delay_s=0.0)] * 10}), fake)
    before = Tries(attempts=2, first_failure_ms=1, last_failure_ms=2)
    rt._continue_retries([TopicPartition("t", 0, 0, retry_marks.encode(0, before))])
    rt.step()  # the third attempt anywhere in the group: the budget of 3 is spent
    sink = rt.dead_letters
    assert isinstance(sink, ListSink)
    assert [(r.value, reason, n) for r, reason, n in sink.letters] == [
        (b"poison", "RETRIES_EXHAUSTED", 3)
    ]


def test_async_commits_keep_a_mark_until_the_broker_confirms_it() -> None:
    fake = Marking()
    commits = AsyncCommits(static_member=False)
    commits.commit(fake, {("t", 0): 5}, {("t", 0): "fleet.retry:5:1:1:1"})
    commits.commit(fake, {("t", 1): 9})  # another partition's commit resends the unconfirmed
    assert fake.metadata[("t", 0)] == "fleet.retry:5:1:1:1"
    assert fake.metadata[("t", 1)] is None
    commits.commit(fake, {("t", 0): 6})  # moved past the record: the mark goes
    assert fake.metadata[("t", 0)] is None
