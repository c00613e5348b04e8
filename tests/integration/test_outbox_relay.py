"""The outbox relay on a real broker: R-OUT-1 to R-OUT-7.

A consumer folds on ``(BranchKey, Lsn)`` so redelivery is observable: it counts what the
transport delivered and compares the folded state with what the runs committed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline import schemas
from pipeline.errors import StoreError
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.settings import consumer_config
from pipeline.outbox import (
    Fold,
    PublishFailure,
    Relay,
    RowStatus,
    fold_position,
    outbox,
    outbox_status,
)
from pipeline.outbox.sent import is_pending, is_sent
from pipeline.runs import Executor, RunJournal, branch_key_of
from pipeline.runs.tables import run
from pipeline.store import make_engine, session_factory
from pipeline.support.processes import spawn_fleet
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name
from tests.conftest import make_topic_factory

pytestmark = pytest.mark.kafka

Event = tuple[str, int, Any]  # (kind, step, payload)


# -- harness ---------------------------------------------------------------------------------
def _store(tmp_path: Path) -> tuple[str, Engine, sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    engine = make_engine(url)
    return url, engine, session_factory(engine)


def _decode(value: bytes) -> Event:
    body = schemas.decode("outbox_event", value)
    payload = json.loads(body["payload"]) if body["payload"] else None
    return (body["kind"], body["step"], payload)


class TopicReader:
    """Reads a topic from the start; keeps every record in arrival order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer(consumer_config(bootstrap, unique_name("test.outbox")))
        self.consumer.subscribe([topic])
        self.records: list[tuple[str, int, int, Event]] = []  # branch, lsn, partition, event

    def read(self, *, until: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            pos = fold_position(msg.headers())
            assert pos is not None, "every relayed record carries fleet.branchKey / fleet.lsn"
            self.records.append((pos[0], pos[1], msg.partition(), _decode(msg.value())))

    def read_all(self, count: int, timeout: float = 60.0) -> None:
        """Read until ``count`` distinct (branch, lsn) pairs, then a quiet second for copies."""
        self.read(until=lambda: len(self.unique()) >= count, timeout=timeout)
        quiet = time.monotonic() + 1.0
        self.read(until=lambda: time.monotonic() > quiet, timeout=5.0)

    def unique(self) -> set[tuple[str, int]]:
        return {(b, lsn) for b, lsn, _, _ in self.records}

    def fold(self) -> Fold[Event]:
        fold: Fold[Event] = Fold()
        for branch, lsn, _, event in self.records:
            fold.offer(branch, lsn, event)
        return fold

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def reader_factory() -> Iterator[Callable[[str, str], TopicReader]]:
    readers: list[TopicReader] = []

    def make(bootstrap: str, topic: str) -> TopicReader:
        readers.append(TopicReader(bootstrap, topic))
        return readers[-1]

    yield make
    for r in readers:
        r.close()


def expected_events(steps: int, *, completed: bool = True) -> list[Event]:
    total, out = 0, []
    for n in range(1, steps + 1):
        total += n
        out.append(("STEP", n, {"step": n, "total": total}))
    if completed:
        out.append(("COMPLETED", 0, None))
    return out


class RelayThread:
    def __init__(self, relay: Relay) -> None:
        self.relay, self.stop = relay, threading.Event()
        self.thread = threading.Thread(target=relay.run_forever, args=(self.stop,), name="relay")

    def __enter__(self) -> RelayThread:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def _backlog(engine: Engine) -> int:
    return outbox_status(engine).backlog


# -- 1, 2, 3, 7, 9: broker down for a whole run ------------------------------------------------
def test_broker_down_for_a_whole_run_completes_then_every_event_ships(
    kafka_own: LocalCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reader_factory: Callable[[str, str], TopicReader],
) -> None:
    """R-OUT-2: a user's broker being down is not an agent outage -- the run
    completes with zero broker calls from executor threads; when the broker is back every event
    ships; relay lag is a metric."""
    bootstrap = kafka_own.bootstrap_servers
    topic = make_topic_factory(bootstrap)("outbox-down", partitions=3)
    calls: list[tuple[str, int]] = []

    class RecordingProducer(confluent_kafka.Producer):  # type: ignore[misc]
        def __init__(self, conf: dict[str, Any]) -> None:
            calls.append(("__init__", threading.get_ident()))
            super().__init__(conf)

        def produce(self, *a: Any, **k: Any) -> Any:
            calls.append(("produce", threading.get_ident()))
            return super().produce(*a, **k)

        def poll(self, *a: Any) -> Any:
            calls.append(("poll", threading.get_ident()))
            return super().poll(*a)

        def flush(self, *a: Any) -> Any:
            calls.append(("flush", threading.get_ident()))
            return super().flush(*a)

    # every Producer anyone builds from here on is recorded, not only the relay's
    monkeypatch.setattr(confluent_kafka, "Producer", RecordingProducer)
    _, engine, sessions = _store(tmp_path)
    registry = CollectorRegistry()
    relay = Relay(
        engine=engine,
        bootstrap=bootstrap,
        registry=registry,
        delivery_timeout_s=2.0,
        backoff_max_s=1.0,
        metrics_interval_s=0.2,
    )
    runs = [("acme", f"r{i}") for i in range(4)]
    with RelayThread(relay) as relay_thread:
        kafka_own.stop_all()
        executor = Executor(sessions=sessions, journal=RunJournal(topic=topic))
        results = executor.run_many(runs, steps=10, threads=4)

        # 1-2: the run completed normally while the broker was down
        assert [len(r.steps) for r in results] == [10] * 4
        with engine.connect() as conn:
            assert set(conn.execute(select(run.c.status)).scalars()) == {"completed"}
        assert _backlog(engine) == 44
        # 7: zero broker calls from executor threads, while the relay thread did call it
        broker_threads = {tid for _, tid in calls}
        assert executor.thread_ids and not (executor.thread_ids & broker_threads)
        assert relay_thread.thread.ident in broker_threads
        wait_until(
            lambda: (registry.get_sample_value("fleet_outbox_backlog_rows") or 0) == 44,
            timeout_s=30,
            what="the backlog metric",
        )
        wait_until(
            lambda: (
                sum(
                    registry.get_sample_value(
                        "fleet_outbox_publish_errors_total", {"reason": r.value}
                    )
                    or 0
                    for r in PublishFailure
                )
                > 0
            ),
            timeout_s=60,
            what="failed deliveries while the broker is down",
        )
        assert (registry.get_sample_value("fleet_outbox_oldest_unsent_age_seconds") or 0) > 0

        # 3: broker back -> every event ships
        kafka_own.start_again()
        wait_until(lambda: _backlog(engine) == 0, timeout_s=120, what="the backlog to drain")
    assert calls and {name for name, _ in calls} >= {"produce"}
    assert not (executor.thread_ids & {tid for _, tid in calls})

    reader = reader_factory(bootstrap, topic)
    reader.read_all(44)
    fold = reader.fold()
    assert fold.state() == {branch_key_of(t, r, 1): expected_events(10) for t, r in runs}
    # 9: relay lag is emitted: the shipped batches waited out the outage
    assert (registry.get_sample_value("fleet_outbox_batch_lag_seconds_count") or 0) >= 1
    assert (registry.get_sample_value("fleet_outbox_batch_lag_seconds_sum") or 0) > 0
    assert registry.get_sample_value("fleet_outbox_relay_lag_seconds") is not None
    assert registry.get_sample_value("fleet_outbox_published_total") == 44


# -- 4: order per branch, several runs and branches interleaved ---------------------------------
def test_order_per_branch_with_runs_and_branches_interleaved(
    kafka: BrokerHandle,
    new_topic: Callable[..., str],
    tmp_path: Path,
    reader_factory: Callable[[str, str], TopicReader],
) -> None:
    """R-OUT-3: ascending Lsn per BranchKey at the consumer -- with several runs and
    branches interleaved on shared partitions, not one branch alone."""
    topic = new_topic("outbox-order", partitions=2)
    _, engine, sessions = _store(tmp_path)
    journal = RunJournal(topic=topic)
    executor = Executor(sessions=sessions, journal=journal)
    runs = [("acme", f"r{i}") for i in range(6)]
    relay = Relay(engine=engine, bootstrap=kafka.bootstrap, batch_size=7)
    with RelayThread(relay):
        executor.run_many([(t, r) for t, r in runs], steps=8, threads=3)
        wait_until(lambda: _backlog(engine) == 0, timeout_s=60, what="the first branches to ship")
        for tenant, run_id in runs[:2]:  # two runs rewind and go on on a second branch
            with sessions.begin() as s:
                journal.rewind(s, tenant=tenant, run_id=run_id, to_step=5)
            executor.continue_run(tenant=tenant, run_id=run_id, steps=4)
        wait_until(lambda: _backlog(engine) == 0, timeout_s=60, what="the backlog to drain")
    with engine.connect() as conn:
        shipped = set(
            conn.execute(select(outbox.c.branch_key, outbox.c.lsn).where(is_sent())).all()
        )
        status = {
            (b, lsn): RowStatus(st)
            for b, lsn, st in conn.execute(
                select(outbox.c.branch_key, outbox.c.lsn, outbox.c.status)
            ).all()
        }
    reader = reader_factory(kafka.bootstrap, topic)
    reader.read_all(len(shipped))
    # every sent row arrived; anything else that arrived was in flight when its branch was
    # abandoned by a rewind (docs/outbox.md, crash windows)
    assert shipped <= reader.unique()
    assert all(status[k] is RowStatus.DROPPED for k in reader.unique() - shipped)
    per_branch: dict[str, list[int]] = {}
    for branch, lsn, _, _ in reader.records:
        per_branch.setdefault(branch, []).append(lsn)
    assert len(per_branch) == 8
    for branch, lsns in per_branch.items():
        assert lsns == sorted(lsns), f"{branch} arrived out of order: {lsns}"
    # the interleaving is real: some partition switches between branches many times
    switches: dict[int, int] = {}
    last: dict[int, str] = {}
    for branch, _, partition, _ in reader.records:
        if last.get(partition) not in (None, branch):
            switches[partition] = switches.get(partition, 0) + 1
        last[partition] = branch
    assert max(switches.values()) >= 3


# -- 5: forced redelivery (ack loss) ------------------------------------------------------------
class AckLosingRelay(Relay):
    """Loses the ack of its first ``losses`` confirmed batches (the broker has them)."""

    losses = 2

    def _ack(self, rows: list[Any]) -> None:
        if rows and self.losses > 0:
            self.losses -= 1
            raise StoreError("injected: ack lost after the broker confirmed")
        super()._ack(rows)


def test_forced_redelivery_folds_to_the_single_delivery_state(
    kafka: BrokerHandle,
    new_topic: Callable[..., str],
    store_url: str,
    reader_factory: Callable[[str, str], TopicReader],
) -> None:
    """R-OUT-5: exactly-once at the fold, not in transport -- with acks lost the relay
    publishes rows again, and the folded state equals the single-delivery case (SQLite and
    PostgreSQL)."""
    topic = new_topic("outbox-redeliver", partitions=2)
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    runs = [("acme", f"r{i}") for i in range(3)]
    Executor(sessions=sessions, journal=RunJournal(topic=topic)).run_many(runs, steps=10)
    relay = AckLosingRelay(
        engine=engine, bootstrap=kafka.bootstrap, batch_size=12, backoff_initial_s=0.05
    )
    with RelayThread(relay):
        wait_until(lambda: _backlog(engine) == 0, timeout_s=60, what="the backlog to drain")
    assert relay.losses == 0
    reader = reader_factory(kafka.bootstrap, topic)
    reader.read_all(33)
    assert len(reader.records) > 33, "the lost acks must have caused redelivery"
    fold = reader.fold()
    assert fold.duplicates == len(reader.records) - 33
    assert fold.state() == {branch_key_of(t, r, 1): expected_events(10) for t, r in runs}
    engine.dispose()


# -- 6: kill -9 of the relay process mid-batch --------------------------------------------------
def _relay_process(url: str, bootstrap: str, *extra: str) -> subprocess.Popen[bytes]:
    return spawn_fleet(
        [
            "relay", "run", "--store-url", url, "--bootstrap", bootstrap,
            "--delivery-timeout", "5", *extra,
        ],
        stderr=subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.slow
def test_kill_9_relay_process_mid_batch_loses_and_duplicates_nothing_at_the_fold(
    kafka: BrokerHandle,
    new_topic: Callable[..., str],
    tmp_path: Path,
    reader_factory: Callable[[str, str], TopicReader],
) -> None:
    """R-OUT-5: kill the relay mid-batch, restart -- no event lost, none duplicated at
    the fold. The relay is a separate process on the same SQLite (WAL) file the executor writes."""
    topic = new_topic("outbox-kill", partitions=3)
    url, engine, sessions = _store(tmp_path)
    executor = Executor(sessions=sessions, journal=RunJournal(topic=topic))
    runs: list[tuple[str, str]] = []
    writing = threading.Event()
    writing.set()

    def write() -> None:
        # Runs keep coming while relays are killed: each incarnation then has rows in flight
        # when it is killed. (A fixed backlog written first was shipped whole by the first relay
        # before the reader saw a record, and the kills then found nothing left to cut.)
        for i in range(150):
            if not writing.is_set():
                return
            run = ("acme", f"r{i}")
            executor.run_many([run], steps=40)
            runs.append(run)
            time.sleep(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    reader = reader_factory(kafka.bootstrap, topic)
    mid_batch_kills = 0
    try:
        for _ in range(6):
            before = len(reader.records)
            proc = _relay_process(url, kafka.bootstrap, "--batch-size", "20")
            try:
                reader.read(until=lambda b=before: len(reader.records) > b, timeout=60)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                assert proc.stderr is not None
                proc.stderr.close()
            assert proc.returncode == -signal.SIGKILL
            with engine.connect() as conn:
                pending = set(
                    conn.execute(
                        select(outbox.c.branch_key, outbox.c.lsn).where(is_pending())
                    ).all()
                )
            # published (we read it) but never acked: the kill hit between send and ack
            reader.read(until=lambda: False, timeout=0.5)
            if reader.unique() & {(b, lsn) for b, lsn in pending}:
                mid_batch_kills += 1
            if mid_batch_kills >= 2:
                break
    finally:
        writing.clear()
        writer.join(120)
    assert mid_batch_kills >= 1
    final = _relay_process(url, kafka.bootstrap)
    try:
        wait_until(lambda: _backlog(engine) == 0, timeout_s=90, what="the restarted relay to drain")
    finally:
        final.send_signal(signal.SIGTERM)  # a clean stop
        _, err = final.communicate(timeout=60)
    assert final.returncode == 0, err.decode()[-2000:]
    total = len(runs) * 41
    reader.read_all(total)
    fold = reader.fold()
    assert len(reader.records) > total  # the transport did duplicate ...
    assert fold.state() == {branch_key_of(t, r, 1): expected_events(40) for t, r in runs}
    assert sum(len(v) for v in fold.state().values()) == total  # ... the fold did not


# -- 8: only the live branch is exported after a rewind -----------------------------------------
def test_only_the_live_branch_is_exported_after_a_rewind(
    kafka: BrokerHandle,
    new_topic: Callable[..., str],
    tmp_path: Path,
    reader_factory: Callable[[str, str], TopicReader],
) -> None:
    """R-OUT-6: unsent rows of the abandoned branch are never published."""
    topic = new_topic("outbox-rewind")
    _, engine, sessions = _store(tmp_path)
    journal = RunJournal(topic=topic)
    executor = Executor(sessions=sessions, journal=journal)
    relay = Relay(engine=engine, bootstrap=kafka.bootstrap)
    executor.run(tenant="acme", run_id="r", steps=3, complete=False)
    assert relay.drain() == 3  # branch 1, lsn 1-3 shipped
    executor.continue_run(tenant="acme", run_id="r", steps=3)  # lsn 4-6, never shipped
    with sessions.begin() as s:
        journal.rewind(s, tenant="acme", run_id="r", to_step=2)
    executor.continue_run(tenant="acme", run_id="r", steps=2)
    with sessions.begin() as s:
        journal.complete(s, tenant="acme", run_id="r")
    assert relay.drain() == 4  # REWOUND, steps 3-4 again, COMPLETED -- all on branch 2
    relay.close()
    reader = reader_factory(kafka.bootstrap, topic)
    reader.read_all(7)
    old, new = branch_key_of("acme", "r", 1), branch_key_of("acme", "r", 2)
    assert sorted(lsn for b, lsn, _, _ in reader.records if b == old) == [1, 2, 3]
    assert reader.fold().state() == {
        old: expected_events(3, completed=False),
        new: [("REWOUND", 2, {"step": 2, "total": 3}), *expected_events(4)[2:]],
    }
