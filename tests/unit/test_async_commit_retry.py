"""A failed asynchronous offset commit is sent again even when no later batch comes.

Seen in CI (tests/integration/test_pools.py, kill -9 of one of four members): every effect was
applied and the group settled, yet one partition's committed offset stayed one behind. The pull
path commits asynchronously and a failed commit (refused while the group rebalanced) was only
ever resent *with the next commit*; at the end of a stream there is none, so the lag never
cleared. These tests drive the production ``AsyncCommits`` with a recording consumer.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from pipeline.runtime.commits import RETRY_S, AsyncCommits


class _Consumer:
    def __init__(self) -> None:
        self.commits: list[dict[tuple[str, int], int]] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})


def _commits(now: list[float]) -> tuple[AsyncCommits, _Consumer, list[str]]:
    failures: list[str] = []
    commits = AsyncCommits(static_member=False, on_failure=failures.append, clock=lambda: now[0])
    return commits, _Consumer(), failures


def _refused(tp: tuple[str, int], offset: int) -> tuple[Any, list[TopicPartition]]:
    return KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [TopicPartition(*tp, offset)]


def test_a_commit_refused_during_a_rebalance_is_sent_again_with_no_new_batch() -> None:
    now = [100.0]
    commits, consumer, failures = _commits(now)
    commits.commit(consumer, {("t", 3): 41})
    commits.on_commit(*_refused(("t", 3), 41))  # the stream's last commit, refused
    assert failures and commits.fencing() is None  # a rebalance, not a fencing
    commits.retry(consumer)
    assert len(consumer.commits) == 1, "not before RETRY_S: a long rebalance is no hot loop"
    now[0] += RETRY_S
    commits.retry(consumer)
    assert consumer.commits[-1] == {("t", 3): 41}, "the refused offset was never sent again"
    commits.on_commit(None, [TopicPartition("t", 3, 41)])  # accepted this time
    now[0] += 10 * RETRY_S
    commits.retry(consumer)
    assert len(consumer.commits) == 2 and not commits.sent


def test_a_revoked_partitions_refused_offset_is_not_sent_again() -> None:
    now = [0.0]
    commits, consumer, _ = _commits(now)
    commits.commit(consumer, {("t", 1): 7, ("t", 2): 9})
    commits.on_commit(*_refused(("t", 1), 7))
    commits.forget({("t", 1), ("t", 2)})  # revoked: the new owner commits them
    now[0] += RETRY_S
    commits.retry(consumer)
    assert len(consumer.commits) == 1
