"""A pipelined commit (``RuntimeConfig.pipelined_commit``, the gateway's inbox): an at-most-once
batch's offsets go asynchronously and its inject waits for the commit's answer while the loop
handles the next batches (``pipeline/runtime/awaiting_commit.py``).

R-ACK-3 (commit before inject, at most once): an inject runs only once a commit covering its
record is confirmed; a refused commit, a lost partition or no answer within the budget skips it
(a visible loss, never a double). The production ``ConsumerRuntime`` and ``AwaitingCommit`` run
here over the shipped ``FakeConsumer``, which serves commit answers at the next ``consume`` as
librdkafka does; ``tests/integration/test_pipelined_commit.py`` checks the broker's committed
offset at each inject on a real broker.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from pipeline.runtime.awaiting_commit import AwaitingCommit
from pipeline.runtime.batch import Batch
from pipeline.runtime.commits import SYNC_COMMIT_RETRY_S
from pipeline.testing import FakeConsumer

from .test_runtime import Pull, _pull_runtime, sessions

__all__ = ["sessions"]  # the fixture, imported for pytest


def _runtime(sessions: Any, values: list[str], forward: set[str]) -> tuple[Any, FakeConsumer, Pull]:
    return _pull_runtime(sessions, values, forward, pipelined_commit=True, batch_size=2)


def test_the_inject_waits_for_the_commits_answer_and_the_next_batch_does_not(
    sessions: Any,
) -> None:
    """The loop handles the next batch while the brief's commit is unanswered; the brief is
    injected once the answer confirms it, the broker then holding its offset."""
    rt, fake, handler = _runtime(sessions, ["brief", "p0", "p1", "p2"], forward={"brief"})
    fake.hold_answers = True  # the commit in flight
    rt.step()
    assert fake.commit_modes == ["async"], "no synchronous commit: the loop did not wait"
    assert handler.stored == ["brief", "p0"], "its bookkeeping ran with the transaction"
    assert handler.injected == [], "injected before the commit was confirmed"
    rt.step()  # the next batch: handled while the first commit is still unanswered
    assert handler.stored == ["brief", "p0", "p1", "p2"]
    assert handler.injected == []
    fake.hold_answers = False
    rt.step()  # serves the answer; the next batch's offsets go before the inject runs
    assert [(v, c) for v, c, _ in handler.injected] == [("brief", {("t", 0): 4})]


def test_a_refused_commit_skips_the_inject_for_good(sessions: Any) -> None:
    """A refused commit (say, a request timeout: it may or may not have landed) skips the
    inject; the offsets going again later never bring it back."""
    rt, fake, handler = _runtime(sessions, ["brief", "p0"], forward={"brief"})
    fake.fail_commits = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    rt.step()
    rt.step()  # the refusal is served
    assert handler.stored == ["brief", "p0"] and handler.injected == []
    fake.fail_commits = None
    rt.async_commits.flush(fake)
    rt.step()
    assert fake.committed == {("t", 0): 2} and handler.injected == []


def test_a_coordinator_moving_is_waited_out_and_the_resent_commit_confirms(
    sessions: Any,
) -> None:
    """``NOT_COORDINATOR`` (a broker roll) means not applied: the batch waits for the offsets
    sent again, as the synchronous commit tried again (the ``rolling-restart`` scenario)."""
    rt, fake, handler = _runtime(sessions, ["brief", "p0"], forward={"brief"})
    fake.fail_commits = KafkaError(KafkaError.NOT_COORDINATOR)
    rt.step()
    rt.step()
    assert handler.injected == [] and rt.awaiting, "given up on a coordinator that moved"
    fake.fail_commits = None
    rt.async_commits.commit(fake, {("t", 0): 2})  # what ``AsyncCommits.retry`` sends
    rt.step()
    assert [v for v, _, _ in handler.injected] == ["brief"]


def test_one_commit_in_flight_and_injects_in_the_order_their_batches_were_handled(
    sessions: Any,
) -> None:
    """A commit goes only once the one before it was answered: the batches handled meanwhile
    go together in the next (a commit per batch queued at the broker for seconds)."""
    rt, fake, handler = _runtime(sessions, ["b0", "b1", "b2", "b3", "b4"], forward={"b0", "b1", "b2", "b3", "b4"})  # fmt: skip
    fake.hold_answers = True
    rt.step()
    rt.step()
    rt.step()
    assert fake.commit_calls == 1, "a second commit sent before the first was answered"
    fake.hold_answers = False
    rt.step()  # the first answer: the two batches since go in one commit
    assert [v for v, _, _ in handler.injected] == ["b0", "b1"]
    assert fake.commit_calls == 2 and fake.committed == {("t", 0): 5}
    rt.step()
    assert [v for v, _, _ in handler.injected] == ["b0", "b1", "b2", "b3", "b4"]


def test_a_revoke_settles_the_waiting_batches_before_the_partitions_go(sessions: Any) -> None:
    """Before a rebalance moves partitions, one synchronous commit confirms every waiting batch
    and its injects run: the next owner starts past them, and none is lost to the move."""
    rt, fake, handler = _runtime(sessions, ["brief", "p0"], forward={"brief"})
    rt.rebalance.on_assign(None, [TopicPartition("t", 0)])
    fake.hold_answers = True
    rt.step()
    rt.rebalance.on_revoke(None, [TopicPartition("t", 0)])
    assert fake.commit_modes[-1] == "sync" and fake.committed == {("t", 0): 2}
    assert [(v, c) for v, c, _ in handler.injected] == [("brief", {("t", 0): 2})]
    assert not rt.awaiting


def test_a_lost_partition_skips_the_inject(sessions: Any) -> None:
    """Lost (not revoked): nothing may be committed for it, so nothing waiting on it runs."""
    rt, fake, handler = _runtime(sessions, ["brief", "p0"], forward={"brief"})
    rt.rebalance.on_assign(None, [TopicPartition("t", 0)])
    fake.hold_answers = True
    rt.step()
    rt.rebalance.on_lost(None, [TopicPartition("t", 0)])
    fake.hold_answers = False
    rt.step()  # the late answer confirms a commit that no longer counts
    assert handler.injected == [] and not rt.awaiting


def test_close_settles_the_waiting_batches(sessions: Any) -> None:
    rt, fake, handler = _runtime(sessions, ["brief", "p0"], forward={"brief"})
    fake.hold_answers = True
    rt.step()
    rt.close()
    assert [v for v, _, _ in handler.injected] == ["brief"] and fake.committed == {("t", 0): 2}


def test_no_answer_within_the_budget_skips_the_inject() -> None:
    now = [0.0]
    ran: list[str] = []
    awaiting = AwaitingCommit(clock=lambda: now[0])
    batch = Batch()
    batch.staged.after_commit(lambda: ran.append("inject"))
    awaiting.add(batch, {("t", 0): 5})
    awaiting.run_ready()
    now[0] += SYNC_COMMIT_RETRY_S
    awaiting.on_commit(None, [TopicPartition("t", 0, 4)])  # an earlier batch's offset
    awaiting.run_ready()
    assert ran == [] and not awaiting
    awaiting.on_commit(None, [TopicPartition("t", 0, 5)])  # too late: it was given up
    assert ran == []


def test_a_later_batchs_commit_confirms_an_earlier_one_and_a_crash_hook_sees_it() -> None:
    """The offset moved past both; the crash hook (``fault_after_commit``, the
    ``commit-inject`` chaos window) runs after the confirmation, before the inject."""
    order: list[str] = []
    awaiting = AwaitingCommit(fault_after_commit=lambda n: order.append(f"hook {n}"))
    first, second = Batch(), Batch()
    first.staged.after_commit(lambda: order.append("inject first"))
    second.staged.after_commit(lambda: order.append("inject second"))
    awaiting.add(first, {("t", 0): 3, ("t", 1): 7})
    awaiting.add(second, {("t", 0): 9})
    awaiting.on_commit(None, [TopicPartition("t", 0, 9)])
    awaiting.run_ready()
    assert order == [], "t/1 of the first batch is not confirmed yet: nothing runs out of order"
    awaiting.on_commit(None, [TopicPartition("t", 1, 7)])
    awaiting.run_ready()
    assert order == ["hook 1", "inject first", "hook 1", "inject second"]
