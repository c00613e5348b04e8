"""The long-running relay fed from the writer's commit (pipeline/outbox/feed.py, docs/outbox.md
invariant 10): with fed commits, commits of a writer that does not feed it, and a failed
delivery, every branch still reaches the fold complete, in lsn order, each row with the value
it was written with, and the watermark reaches every row (R-OUT-3, R-OUT-4, R-OUT-5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from pipeline.errors import BrokerError
from pipeline.outbox import Fold, Relay, outbox_status, write
from pipeline.outbox.headers import BRANCH_HEADER, LSN_HEADER
from pipeline.outbox.wake import collect, collected, committed_rows, wake_on_commit
from pipeline.store import make_engine, session_factory


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


class Broker:
    """Delivers on poll; the first delivery of ``(branch, lsn)`` in ``fail_once`` fails."""

    def __init__(self, fail_once: set[tuple[bytes, bytes]]) -> None:
        self.fail_once = fail_once
        self.queue: list[tuple[Any, list[tuple[str, bytes]], bytes]] = []
        self.sent: list[tuple[list[tuple[str, bytes]], bytes]] = []
        self.attempts: list[tuple[bytes, int]] = []  # every record handed over, failed or not

    def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        self.queue.append((on_delivery, list(headers), value))

    def poll(self, _timeout: float = 0) -> int:
        queue, self.queue = self.queue, []
        for callback, headers, value in queue:
            h = dict(headers)
            position = (h[BRANCH_HEADER], h[LSN_HEADER])
            self.attempts.append((position[0], int(position[1])))
            if position in self.fail_once:
                self.fail_once.discard(position)
                callback(BrokerError("injected"), None)
                continue
            self.sent.append((headers, value))
            callback(None, None)
        return len(queue)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


def _counted_relay(engine: Engine, broker: Broker) -> tuple[Relay, list[int]]:
    """A relay on ``broker`` whose store reads are counted (``reads[0]``): a fed pass ships
    without one."""
    relay = Relay(
        engine=engine,
        bootstrap="unused:1",
        producer_factory=lambda _c: broker,
        backoff_initial_s=0.01,
        idle_wait_s=0.02,
    )
    reads = [0]
    read = relay._read.read

    def counted(**kw: Any) -> list[Any]:
        reads[0] += 1
        return read(**kw)

    relay._read.read = counted  # type: ignore[method-assign]
    return relay, reads


def _wait_drained(engine: Engine, timeout_s: float = 20.0) -> None:
    """Until every row is acked (or ``timeout_s``: the test's own assertion then says so)."""
    deadline = time.monotonic() + timeout_s
    while outbox_status(engine).backlog and time.monotonic() < deadline:
        time.sleep(0.01)


def _folded(broker: Broker) -> tuple[dict[str, list[bytes]], Fold]:
    """What a consumer's fold applies, per branch, from everything ``broker`` was sent."""
    applied: dict[str, list[bytes]] = {"a": [], "b": []}
    fold = Fold(apply=lambda branch, _lsn, value: applied[branch].append(value))
    for headers, value in broker.sent:
        fold.offer_record(headers, value)
    return applied, fold


def test_fed_and_unfed_commits_and_a_failure_reach_the_fold_complete_and_in_order(
    engine: Engine,
) -> None:
    broker = Broker(fail_once={(b"a", b"9")})
    relay, reads = _counted_relay(engine, broker)
    fed = session_factory(engine)
    wake_on_commit(fed, relay.wake)  # as the gateway's sessions
    other = session_factory(engine)  # a writer that neither feeds nor wakes the relay
    stop = threading.Event()
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    written: dict[str, list[bytes]] = {"a": [], "b": []}
    try:
        for i in range(80):
            sessions = other if i % 9 == 4 else fed
            with sessions.begin() as s:
                for branch in ("a", "b")[: 1 + i % 2]:
                    value = f"{branch}{len(written[branch]) + 1}".encode()
                    write(s, topic="t", key=branch.encode(), value=value, branch_key=branch)
                    written[branch].append(value)
            time.sleep(0.002)
        _wait_drained(engine)
    finally:
        stop.set()
        thread.join(10)
    assert outbox_status(engine).backlog == 0  # every row acked (its watermark raised)
    applied, fold = _folded(broker)
    assert applied == written  # each row once, in lsn order, as written: nothing lost or made up
    last: dict[bytes, int] = {}
    for branch, lsn in broker.attempts:  # on the wire: the next lsn, or a resend from lower
        assert lsn <= last.get(branch, 0) + 1, (branch, lsn, last.get(branch))
        last[branch] = lsn
    assert not broker.fail_once  # the failure happened (and lsn 9 of a was sent again)
    assert fold.positions() == {"a": len(written["a"]), "b": len(written["b"])}
    # fed (SQLite and PostgreSQL): most passes shipped without reading
    assert reads[0] < 80, reads[0]


def test_rows_a_bare_connection_hands_over_reach_the_fold_complete_and_in_order(
    engine: Engine,
) -> None:
    """A writer with no ``Session`` (the inject queue's receipts) collects the rows ``write``
    inserts on its connection and hands them over after its ``COMMIT``; a rolled-back
    transaction hands nothing over, one with a savepoint is not trusted (the relay reads), and
    every row still reaches the fold once, in lsn order (R-OUT-3, R-OUT-4)."""
    broker = Broker(fail_once=set())
    relay, reads = _counted_relay(engine, broker)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    written: dict[str, list[bytes]] = {"a": [], "b": []}
    try:
        with engine.connect() as conn:
            for i in range(80):
                collect(conn)
                try:
                    with conn.begin():
                        for branch in ("a", "b")[: 1 + i % 2]:
                            value = f"{branch}{len(written[branch]) + 1}".encode()
                            if i % 13 == 6:  # inside a savepoint: not trusted
                                with conn.begin_nested():
                                    write(conn, topic="t", key=b"k", value=value, branch_key=branch)
                            else:
                                write(conn, topic="t", key=b"k", value=value, branch_key=branch)
                            if i % 17 == 8:
                                raise RuntimeError("rolled back")
                            written[branch].append(value)
                except RuntimeError:
                    collected(conn)  # noted (SQLite) and dropped: never handed over
                    continue
                rows, trusted = collected(conn)
                assert not conn.in_transaction()
                committed_rows(engine, rows, trusted=trusted)
                relay.wake()
                time.sleep(0.002)
        _wait_drained(engine)
    finally:
        stop.set()
        thread.join(10)
    assert outbox_status(engine).backlog == 0
    applied, _fold = _folded(broker)
    assert applied == written  # each row once, in lsn order, as written: nothing lost or made up
    # fed (SQLite and PostgreSQL): most passes shipped without reading
    assert reads[0] < 60, reads[0]
