"""Outbox and run-journal store contract: the same suite on SQLite (WAL) and PostgreSQL.

The relay here talks to a fake producer (deliveries succeed or fail on demand); the real broker
is in tests/integration/test_outbox_relay.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import BrokerError, DeliveryError
from pipeline.outbox import (
    LSN_HEADER,
    Relay,
    RowStatus,
    abandon_branch,
    outbox,
    outbox_status,
    write,
)
from pipeline.outbox.sent import is_sent
from pipeline.runs import Executor, RunJournal, branch_key_of
from pipeline.store import make_engine, session_factory


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


def _statuses(engine: Engine, branch: str) -> dict[int, RowStatus]:
    """Each row's status as readers see it: a PENDING row at or below its branch's ack
    watermark is SENT (pipeline/outbox/sent.py)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(outbox.c.lsn, outbox.c.status, is_sent()).where(outbox.c.branch_key == branch)
        )
        return {
            int(lsn): RowStatus.SENT if sent else RowStatus(status) for lsn, status, sent in rows
        }


def test_lsns_are_per_branch_gapless_and_rollback_takes_nothing(
    sessions: sessionmaker[Session],
) -> None:
    with sessions.begin() as s:
        assert [write(s, topic="t", key=b"k", value=b"v", branch_key="a") for _ in range(3)] == [
            1,
            2,
            3,
        ]
        assert write(s, topic="t", key=b"k", value=b"v", branch_key="b") == 1
        assert write(s, topic="t", key=b"k", value=b"v", branch_key="a", tenant="other") == 1
    with sessions() as s:
        write(s, topic="t", key=b"k", value=b"v", branch_key="a")
        s.rollback()  # write() never commits: the caller's rollback drops row and lsn together
    with sessions.begin() as s:
        assert write(s, topic="t", key=b"k", value=b"v", branch_key="a") == 4


def test_row_keeps_the_exact_record(engine: Engine, sessions: sessionmaker[Session]) -> None:
    headers = [("sig", b"\x00\x01signed"), ("v", b"1")]
    with sessions.begin() as s:
        write(s, topic="fleet.inbox.h1", key=None, value=None, headers=headers, branch_key="gw")
    with engine.connect() as conn:
        row = conn.execute(select(outbox)).one()
    assert (row.topic, row.key, row.value) == ("fleet.inbox.h1", None, None)
    from pipeline.record_headers import unpack_headers

    assert unpack_headers(row.headers) == headers


def test_a_store_error_in_a_write_is_sqlalchemys_and_leaves_nothing(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """``write`` runs its two statements on the raw DB-API cursor, yet a database
    error reaches the caller as SQLAlchemy raises it -- the runtime's batch path and the socket's
    group commit catch ``SQLAlchemyError`` (a full disk is ``OperationalError``) -- and the
    caller's rollback takes the lsn back with it."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    with sessions.begin() as s:
        assert write(s, topic="t", key=b"k", value=b"v", branch_key="a") == 1
    with pytest.raises(SQLAlchemyError) as caught, sessions.begin() as s:
        s.execute(text("CREATE TEMPORARY TABLE outbox (id INTEGER)"))  # hides the real one
        write(s, topic="t", key=b"k", value=b"v", branch_key="a")
    assert isinstance(caught.value, DBAPIError) and "outbox" in str(caught.value)
    with sessions.begin() as s:  # nothing of the failed write stayed: the next lsn is 2
        assert write(s, topic="t", key=b"k", value=b"v", branch_key="a") == 2


def test_concurrent_writers_of_one_branch_get_unique_gapless_lsns(
    sessions: sessionmaker[Session],
) -> None:
    got: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(15):
            with sessions.begin() as s:
                lsn = write(s, topic="t", key=b"k", value=b"v", branch_key="hot")
            with lock:
                got.append(lsn)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 61))


def test_abandoned_branch_drops_unsent_rows_and_refuses_writes(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    with sessions.begin() as s:
        for _ in range(3):
            write(s, topic="t", key=b"k", value=b"v", branch_key="old")
    with engine.begin() as conn:  # pretend lsn 1 already shipped
        conn.execute(
            outbox.update()
            .where(outbox.c.branch_key == "old", outbox.c.lsn == 1)
            .values(status=int(RowStatus.SENT))
        )
    with sessions.begin() as s:
        assert abandon_branch(s, branch_key="old") == 2
    assert _statuses(engine, "old") == {
        1: RowStatus.SENT,
        2: RowStatus.DROPPED,
        3: RowStatus.DROPPED,
    }
    with pytest.raises(DeliveryError) as info, sessions.begin() as s:
        write(s, topic="t", key=b"k", value=b"v", branch_key="old")
    assert info.value.reason == "BRANCH_ABANDONED"


def test_journal_rewind_opens_a_live_branch_and_drops_the_old_ones_unsent_rows(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-6: only the live branch is exported after a rewind."""
    journal = RunJournal(topic="t")
    executor = Executor(sessions=sessions, journal=journal)
    executor.run(tenant="acme", run_id="r1", steps=4, complete=False)
    with sessions.begin() as s:
        new_key = journal.rewind(s, tenant="acme", run_id="r1", to_step=2)
    executor.continue_run(tenant="acme", run_id="r1", steps=2)
    old_key = branch_key_of("acme", "r1", 1)
    assert new_key == branch_key_of("acme", "r1", 2)
    assert set(_statuses(engine, old_key).values()) == {RowStatus.DROPPED}
    assert _statuses(engine, new_key) == {
        1: RowStatus.PENDING,
        2: RowStatus.PENDING,
        3: RowStatus.PENDING,
    }
    with sessions() as s:
        state = journal.state_at(s, tenant="acme", run_id="r1", branch=2, step=4)
        inherited = journal.state_at(s, tenant="acme", run_id="r1", branch=2, step=2)
    assert inherited == {"step": 2, "total": 3}
    assert state == {"step": 4, "total": 3 + 3 + 4}  # steps 3 and 4 re-ran on the new branch
    st = outbox_status(engine, tenant="acme")
    assert st.backlog == 3
    by_key = {b.branch_key: b for b in st.branches}
    assert by_key[old_key].abandoned and by_key[old_key].pending == 0
    assert by_key[new_key].next_lsn == 4


class FakeProducer:
    """Delivers on poll/flush; ``fail(topic, key, value, headers) -> bool`` picks failures."""

    def __init__(self, fail: Callable[[dict[str, bytes]], bool]) -> None:
        self.fail = fail
        self.queue: list[tuple[Any, dict[str, bytes]]] = []
        self.sent: list[dict[str, bytes]] = []

    def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        self.queue.append((on_delivery, dict(headers)))

    def poll(self, _timeout: float = 0) -> int:
        queue, self.queue = self.queue, []
        for callback, headers in queue:
            failed = self.fail(headers)
            if not failed:
                self.sent.append(headers)
            callback(BrokerError("injected") if failed else None, None)
        return len(queue)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


def test_relay_acks_only_each_branchs_confirmed_prefix_then_resends_from_the_gap(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-4: ack only what the broker accepted; after a failure resend from the lowest
    unacknowledged lsn of that branch (the others go on)."""
    with sessions.begin() as s:
        for _ in range(5):
            write(s, topic="t", key=b"a", value=b"v", branch_key="a")
            write(s, topic="t", key=b"b", value=b"v", branch_key="b")
    failing = {"on": True}

    def fail(headers: dict[str, bytes]) -> bool:
        return failing["on"] and headers["fleet.branchKey"] == b"a" and headers[LSN_HEADER] == b"3"

    producer = FakeProducer(fail)
    relay = Relay(engine=engine, bootstrap="unused:1", producer_factory=lambda _c: producer)
    with pytest.raises(BrokerError):
        relay.run_once()
    # lsn 4 and 5 of branch a were delivered, but they follow a failure: not acked
    assert _statuses(engine, "a") == {
        1: RowStatus.SENT,
        2: RowStatus.SENT,
        3: RowStatus.PENDING,
        4: RowStatus.PENDING,
        5: RowStatus.PENDING,
    }
    assert set(_statuses(engine, "b").values()) == {RowStatus.SENT}
    failing["on"] = False
    producer.sent.clear()
    assert relay.drain() == 3
    assert [h[LSN_HEADER] for h in producer.sent] == [b"3", b"4", b"5"]
    assert relay.metrics.publish_errors_total.labels(reason="other")._value.get() == 1
    assert outbox_status(engine).backlog == 0


def test_relay_never_acks_past_a_pending_earlier_lsn(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """The ack guard: even a confirmed row stays pending while an earlier lsn of its branch is."""
    with sessions.begin() as s:
        for _ in range(4):
            write(s, topic="t", key=b"a", value=b"v", branch_key="a")
    producer = FakeProducer(lambda _h: False)
    relay = Relay(engine=engine, bootstrap="unused:1", producer_factory=lambda _c: producer)
    rows = relay._fetch(
        first=True
    )  # the relay's own read, (id, tenant, branch_key, lsn, ...) tuples
    batch = relay._produce([r for r in rows if r[3] >= 3])  # as if lsn 1-2 were not yet visible
    relay._settle(batch)
    confirmed, errors = relay._confirmed(batch, set())
    assert len(confirmed) == 2 and errors == []
    relay._ack(confirmed)
    assert set(_statuses(engine, "a").values()) == {RowStatus.PENDING}


def test_a_tenant_relay_acks_only_its_own_pending_rows(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """A fully confirmed batch is acked by id range on SQLite: rows of other tenants and dropped
    rows inside that range must keep their status."""
    with sessions.begin() as s:
        for i in range(6):
            write(s, topic="t", key=b"k", value=b"v", branch_key="x", tenant="a")
            write(s, topic="t", key=b"k", value=b"v", branch_key="y", tenant="b")
            write(s, topic="t", key=b"k", value=b"v", branch_key=f"gone{i}", tenant="a")
    with sessions.begin() as s:
        for i in range(6):
            abandon_branch(s, branch_key=f"gone{i}", tenant="a")
    producer = FakeProducer(lambda _h: False)
    relay = Relay(
        engine=engine, bootstrap="unused:1", tenant="a", producer_factory=lambda _c: producer
    )
    assert relay.drain() == 6
    assert set(_statuses(engine, "x").values()) == {RowStatus.SENT}
    assert set(_statuses(engine, "y").values()) == {RowStatus.PENDING}
    assert set(_statuses(engine, "gone0").values()) == {RowStatus.DROPPED}
    assert all(h["fleet.tenant"] == b"a" for h in producer.sent)
    assert outbox_status(engine, tenant="b").backlog == 6


def test_fleet_outbox_status_reports_backlog_and_next_lsn(
    store_url: str, sessions: sessionmaker[Session]
) -> None:
    import json

    from typer.testing import CliRunner

    from pipeline.cli.main import app

    with sessions.begin() as s:
        for _ in range(3):
            write(s, topic="t", key=b"k", value=b"v", branch_key="a", tenant="acme")
    result = CliRunner().invoke(app, ["outbox", "status", "--store-url", store_url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["backlog"] == 3 and data["oldest_unsent_age_s"] >= 0
    assert data["branches"] == [
        {"tenant": "acme", "branch_key": "a", "next_lsn": 4, "pending": 3, "abandoned": False}
    ]
    table = CliRunner().invoke(app, ["outbox", "status", "--store-url", store_url])
    assert table.exit_code == 0 and "backlog: 3" in table.stdout


class AwayBroker:
    """A producer whose broker is away until :meth:`back`. Like librdkafka, it times a queued
    record out only under a finite ``message.timeout.ms``: :meth:`expire` is the moment the
    outage has outlasted that timeout for the ``n`` oldest queued records (but not for the
    later ones, produced a little after them)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.timeout_ms = int(conf.get("message.timeout.ms", 300_000))
        self.queue: list[tuple[Any, dict[str, bytes]]] = []
        self.sent: list[dict[str, bytes]] = []
        self.away = True
        self.lock = threading.Lock()

    def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        with self.lock:
            self.queue.append((on_delivery, dict(headers)))

    def expire(self, n: int) -> None:
        if self.timeout_ms == 0:
            return  # 0 = never: librdkafka keeps the records queued, in order
        from confluent_kafka import KafkaError

        with self.lock:
            expired, self.queue = self.queue[:n], self.queue[n:]
        for callback, _headers in expired:
            callback(KafkaError(KafkaError._MSG_TIMED_OUT), None)

    def back(self) -> None:
        self.away = False

    def poll(self, _timeout: float = 0) -> int:
        if self.away:
            time.sleep(0.01)
            return 0
        with self.lock:
            queue, self.queue = self.queue, []
        for callback, headers in queue:
            self.sent.append(headers)
            callback(None, None)
        return len(queue)

    def flush(self, timeout: float = 0) -> int:
        return self.poll()


def test_a_broker_outage_never_reorders_a_branch_on_the_wire(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-3 (publish in (BranchKey, Lsn) order) through a broker outage longer than the
    relay's delivery timeout (the ``broker-down`` chaos scenario: lsn 11-14 held after 15-59). With per-record
    timeouts, the broker coming back between the timeout of lsn 3 and of lsn 4 lets 4-6 land
    while 1-3 failed; the relay then resends from lsn 1, after them. The relay's producer never
    times a record out, so the outage only delays the branch, in order; past the delivery
    timeout the waiting rows are reported (timeout) but neither failed nor resent."""
    with sessions.begin() as s:
        for _ in range(6):
            write(s, topic="t", key=b"a", value=b"v", branch_key="a")
    producers: list[AwayBroker] = []

    def factory(conf: dict[str, Any]) -> AwayBroker:
        producers.append(AwayBroker(conf))
        return producers[-1]

    relay = Relay(
        engine=engine,
        bootstrap="unused:1",
        producer_factory=factory,
        delivery_timeout_s=0.2,
        backoff_initial_s=0.05,
    )
    stop = threading.Event()
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not (producers and len(producers[0].queue) == 6) and time.monotonic() < deadline:
            time.sleep(0.01)
        broker = producers[0]
        time.sleep(0.4)  # past the delivery timeout
        broker.expire(3)  # the outage outlasted a finite timeout for lsn 1-3, not yet for 4-6
        broker.back()
        while outbox_status(engine).backlog and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(10)
    lsns = [int(h[LSN_HEADER]) for h in broker.sent]
    assert lsns == [1, 2, 3, 4, 5, 6], f"the branch on the wire: {lsns}"
    assert outbox_status(engine).backlog == 0
    assert relay.metrics.publish_errors_total.labels(reason="timeout")._value.get() == 6
