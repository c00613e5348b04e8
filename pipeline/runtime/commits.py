"""Synchronous offset commits that check every partition's result.

The forward path (at-most-once) injects only after this returns ``ok``; on any error it injects
nothing. Fencing (a second gateway with the same ``group.instance.id``) is reported separately:
the caller must stop, loudly. A member whose session expired is rejoining, not fenced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.support.retrying import Backoff, retry_call

FENCING_CODES = frozenset(
    {
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
    }
)


# Any member sees these while a rebalance is under way: its generation moved on and it rejoins.
REBALANCE_CODES = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)

# What fences a static member (group.instance.id): a second member holds its id now. The
# coordinator answers a static member's request with FENCED_INSTANCE_ID when its instance id is
# registered under another member id, and with UNKNOWN_MEMBER_ID when no member holds the id at
# all -- its session expired (a stall or a network cut past session.timeout.ms) and nobody took
# its place. That second case is not fencing: nobody else consumes its partitions under its
# name, so it rejoins under the same id (librdkafka does so itself; were a second member to
# start meanwhile, one of the two meets FENCED_INSTANCE_ID and stops). Seen in the ``cut-off`` chaos scenario
# (a 60 s cut-off): the commit in flight across the cut came back UNKNOWN_MEMBER_ID and the
# gateway stopped [FENCED] although no other gateway existed. A stale generation
# (ILLEGAL_GENERATION) is not fencing either: a static member still in the group meets it
# whenever another member's join moved the generation on while a commit was in flight (seen: a
# pool of static cooperative-sticky members rejoining after an outage).
STATIC_FENCING_CODES = frozenset({KafkaError.FENCED_INSTANCE_ID})


def fences(codes: AbstractSet[int], *, fatal: bool, static_member: bool) -> bool:
    """Whether a failed commit with these error codes means this member was fenced (it must stop,
    loudly) rather than that the group is rebalancing (rejoin, commit again)."""
    if fatal:
        return True
    if static_member:
        return bool(codes & STATIC_FENCING_CODES)
    return bool(codes & FENCING_CODES) and not codes <= REBALANCE_CODES


@dataclass
class CommitResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    codes: frozenset[int] = frozenset()  # the errors' KafkaError codes
    fatal: bool = False

    def fences(self, *, static_member: bool) -> bool:
        """The commit failed because this member was fenced (see :func:`fences`)."""
        return not self.ok and fences(self.codes, fatal=self.fatal, static_member=static_member)


def commit_offsets(
    consumer: Any,
    offsets: dict[tuple[str, int], int],
    marks: Mapping[tuple[str, int], str] | None = None,
) -> CommitResult:
    """Commit ``{(topic, partition): next_offset}`` synchronously, with a partition's
    ``marks`` entry as its offset metadata (a retried record's state); never raises."""
    if not offsets:
        return CommitResult(ok=True)
    tps = _partitions(offsets, marks or {})
    try:
        result = consumer.commit(offsets=tps, asynchronous=False)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        fatal = bool(isinstance(err, KafkaError) and err.fatal())
        return CommitResult(
            ok=False,
            errors=[str(exc)],
            codes=frozenset() if code is None else frozenset({code}),
            fatal=fatal,
        )
    failed = [tp for tp in (result or []) if tp.error]
    errors = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in failed]
    return CommitResult(
        ok=not errors,
        errors=errors,
        codes=frozenset(tp.error.code() for tp in failed),
        fatal=any(tp.error.fatal() for tp in failed),
    )


# The group coordinator moving or loading (a broker roll, a leader change of its
# __consumer_offsets partition): the commit was refused before it was applied, the member still
# owns its partitions, and the same commit a moment later is the commit it meant. A forward
# batch that skipped its injects on these lost them for nothing (the ``rolling-restart`` chaos scenario, a clean rolling
# restart: COORDINATOR_LOAD_IN_PROGRESS, then one FAILED INJECT_TIMEOUT for a brief that was
# never injected). A timeout is not among them: the commit may have been applied.
COORDINATOR_MOVING_CODES = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError._WAIT_COORD,
    }
)
SYNC_COMMIT_RETRY_S = 10.0  # how long a refused synchronous commit is tried again


class _CoordinatorMoving(Exception):
    """A commit refused only because the group coordinator is moving: worth trying again."""

    def __init__(self, result: CommitResult) -> None:
        super().__init__(result)
        self.result = result


def commit_while_coordinator_moves(
    consumer: Any,
    offsets: dict[tuple[str, int], int],
    marks: Mapping[tuple[str, int], str] | None = None,
    *,
    budget_s: float = SYNC_COMMIT_RETRY_S,
    wait: Callable[[float], bool] | None = None,
) -> tuple[CommitResult, int]:
    """:func:`commit_offsets`, tried again (backoff 0.05 s doubling to 1 s, for ``budget_s``)
    while it fails only with :data:`COORDINATOR_MOVING_CODES`; ``wait(s)`` returning True (a
    stop) ends it. Returns the last result and how many times it was tried again."""
    result = commit_offsets(consumer, offsets, marks)
    if not _coordinator_moving(result):  # every batch's case: one call, no retry machinery
        return result, 0
    retries = 0
    tried = [result]  # the first try's result, then one commit per try

    def once() -> CommitResult:
        result = tried.pop() if tried else commit_offsets(consumer, offsets, marks)
        if _coordinator_moving(result):
            raise _CoordinatorMoving(result)
        return result

    def waiting(seconds: float) -> bool:
        nonlocal retries
        if wait is not None and wait(seconds):
            return True  # a stop: not tried again
        if wait is None:
            time.sleep(seconds)
        retries += 1
        return False

    try:
        result = retry_call(
            once,
            retriable=lambda exc: isinstance(exc, _CoordinatorMoving),
            backoff=Backoff(initial_s=0.05, max_s=1.0),
            deadline_s=budget_s,
            wait=waiting,
        )
    except _CoordinatorMoving as moving:
        return moving.result, retries
    return result, retries


def _coordinator_moving(result: CommitResult) -> bool:
    """Refused only because the group coordinator is moving (worth the same commit again)."""
    return not (result.ok or result.fatal or not result.codes) and (
        result.codes <= COORDINATOR_MOVING_CODES
    )


def _partitions(
    offsets: Mapping[tuple[str, int], int], marks: Mapping[tuple[str, int], str]
) -> list[TopicPartition]:
    return [
        TopicPartition(t, p, o) if (t, p) not in marks else TopicPartition(t, p, o, marks[t, p])
        for (t, p), o in offsets.items()
    ]


RETRY_S = 1.0  # a failed asynchronous commit is sent again after this long (``retry``)


class AsyncCommits:
    """The pull path's asynchronous offset commits (a batch with no at-most-once effect).

    A lost or failed async commit only redelivers records whose dedupe rows are durable, so the
    batch does not wait for the broker's answer. Results arrive through librdkafka's
    ``on_commit`` callback (served by ``poll``/``consume`` on the consume thread): a fencing
    error is kept for the loop to raise (:meth:`fencing`), any other error is logged and counted,
    and the offsets are committed again with the next commit. Before a partition is revoked, and
    at close, the last offsets are committed synchronously (:meth:`flush`) so a rebalance does
    not redeliver a whole window of batches.

    ``one_in_flight`` (a pipelined runtime, whose injects wait for these answers): a commit is
    sent only once the one before it was answered, the offsets of the batches meanwhile going
    together in the next (:meth:`send_unsent`). A broker handles one request of a connection at
    a time, and each commit waits out the coordinator's append linger: a commit per batch at a
    few hundred batches a second queued there for seconds (1.9 s p50 from brief to ``INJECTED``
    at 2,000 msg/s), one per answer keeps up. An answer not come in ``RETRY_S`` stops holding
    the next commit back.
    """

    def __init__(
        self,
        *,
        static_member: bool,
        on_failure: Any = None,
        clock: Callable[[], float] = time.monotonic,
        one_in_flight: bool = False,
    ) -> None:
        self.static_member = static_member
        self.one_in_flight = one_in_flight
        self._in_flight_since: float | None = None  # one_in_flight: the unanswered commit
        self._unsent = False  # one_in_flight: offsets held back until it is answered
        self.on_failure = on_failure  # called with the error text, for metrics and logs
        self.sent: dict[tuple[str, int], int] = {}  # last offset sent per partition
        self.marks: dict[tuple[str, int], str] = {}  # ... and its metadata, if any
        self._fenced: list[str] = []
        self._clock = clock
        self._retry_at: float | None = None  # a failed commit is sent again from then on

    def commit(
        self,
        consumer: Any,
        offsets: dict[tuple[str, int], int],
        marks: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        self.sent.update(offsets)
        if marks or self.marks:  # a retried record's attempts ride as metadata (rare)
            for tp in offsets:
                mark = (marks or {}).get(tp)
                if mark is None:
                    self.marks.pop(tp, None)
                else:
                    self.marks[tp] = mark
        if self._holding_back():
            self._unsent = True
            return
        self._send(consumer)

    def _holding_back(self) -> bool:
        since = self._in_flight_since
        return since is not None and self._clock() - since < RETRY_S

    def send_unsent(self, consumer: Any) -> None:
        """``one_in_flight``: the offsets held back, once the commit before them was answered."""
        if not self._unsent or self._holding_back():
            return
        self._unsent = False
        if self.sent:
            self._send(consumer)

    def _send(self, consumer: Any) -> None:
        """Every unconfirmed offset, asynchronously (a failed one goes again with it)."""
        self._retry_at = None
        self._unsent = False
        if self.one_in_flight:
            self._in_flight_since = self._clock()
        if self.marks:
            tps = _partitions(self.sent, self.marks)
        else:  # every batch's case: no metadata to look up
            tps = [TopicPartition(t, p, o) for (t, p), o in self.sent.items()]
        try:
            consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:  # queueing failed: retried (``retry``)
            self._in_flight_since = None  # no answer will come
            self._failed()
            if self.on_failure is not None:
                self.on_failure(str(exc))

    def _failed(self) -> None:
        if self._retry_at is None:
            self._retry_at = self._clock() + RETRY_S

    def retry(self, consumer: Any) -> None:
        """Send the unconfirmed offsets again once ``RETRY_S`` has passed since a commit failed
        (say, refused while the group rebalanced), whether or not a new batch came: at the end
        of a stream no later commit would carry them, and the partition's committed offset
        would stay behind (lag that never clears) until a revoke or the close."""
        if self._retry_at is None or self._clock() < self._retry_at:
            return
        if not self.sent:
            self._retry_at = None
            return
        self._send(consumer)

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's offset-commit callback (every commit's result comes here)."""
        self._in_flight_since = None  # answered: the next commit may go
        failed = [tp for tp in partitions or [] if tp.error is not None]
        errors: list[KafkaError] = (
            [err] if err is not None else [tp.error for tp in failed if tp.error is not None]
        )
        if not errors:
            for tp in partitions or []:
                if self.sent.get((tp.topic, tp.partition)) == tp.offset:
                    del self.sent[(tp.topic, tp.partition)]  # confirmed: nothing to resend
                    self.marks.pop((tp.topic, tp.partition), None)
            return
        codes = {e.code() for e in errors}
        fatal = any(e.fatal() for e in errors)
        if fences(codes, fatal=fatal, static_member=self.static_member):
            self._fenced.append("; ".join(e.str() for e in errors))
        else:
            self._failed()
            if self.on_failure is not None:
                self.on_failure("; ".join(e.str() for e in errors))

    def fencing(self) -> str | None:
        """The error text of a commit that found this member fenced, once."""
        if not self._fenced:
            return None
        text, self._fenced = "; ".join(self._fenced), []
        return text

    def superseded(self, offsets: dict[tuple[str, int], int]) -> None:
        """A synchronous commit moved these partitions at least as far: never resend less."""
        for tp, offset in offsets.items():
            if self.sent.get(tp, offset) <= offset:
                self.sent.pop(tp, None)
                self.marks.pop(tp, None)

    def reset(self) -> None:
        """Drop everything about the client just dropped: its unconfirmed offsets (its partitions
        were given up as lost, so those records come again and dedupe absorbs them) and any
        fencing its late results reported -- it was fenced already, that is why it went."""
        self.sent.clear()
        self.marks.clear()
        self._fenced.clear()
        self._retry_at = None
        self._in_flight_since = None
        self._unsent = False

    def forget(self, tps: set[tuple[str, int]]) -> None:
        for tp in tps:
            self.sent.pop(tp, None)
            self.marks.pop(tp, None)

    def flush(self, consumer: Any, tps: set[tuple[str, int]] | None = None) -> CommitResult:
        """Commit the last offsets synchronously (all partitions, or ``tps``)."""
        offsets = {tp: o for tp, o in self.sent.items() if tps is None or tp in tps}
        result = commit_offsets(consumer, offsets, self.marks)
        if result.ok:
            self.forget(set(offsets))
        return result
