"""Failure handling costs, each as a RATIO to a baseline measured in the same run.

* ``poison_p99_ratio``: p99 latency (produce -> handled) of the OTHER keys
  while one key is poisoned (retried, dead-lettered, quarantined, later records parked) divided
  by the p99 of the same run without poison. ``ConsumerRuntime`` + ``FailurePorts``, real broker.
* ``park_vs_insert``: parking a record (idempotence check + per-key sequence + row) vs a plain
  row insert into a table of the same shape, one transaction each, SQLite.
* ``is_quarantined_vs_set``: the hot-path lookup vs a bare ``set`` membership test.

Needs ``KAFKA_BOOTSTRAP`` for the broker figure (skipped otherwise).
Run: ``KAFKA_BOOTSTRAP=... python -m bench failures`` (``--quick`` for smaller runs).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table, insert
from sqlalchemy.orm import Session

from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.failures.runtime_adapters import FailurePorts
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.record import Record
from pipeline.runtime.loop import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.outcomes import ACK, Outcome, Retry
from pipeline.runtime.retry import BackoffPolicy
from pipeline.runtime.staging import Staged
from pipeline.store import make_engine, session_factory
from pipeline.testing import unique_name


class _Handler:
    def __init__(self, poison: set[str]) -> None:
        self.poison = poison
        self.latency_ms: list[float] = []

    def handle(self, record: Record, tx: Staged) -> Outcome:
        if record.header_str("msgId") in self.poison:
            return Retry(error="poison")
        if record.key_str != "K":
            sent = record.timestamp_ms
            tx.after_commit(lambda: self.latency_ms.append(time.time() * 1000 - sent))
        return ACK


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def _run_latency(bootstrap: str, n: int, rate: float, poison: bool, tmp: Path) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, dlq = unique_name("bench.inbox"), unique_name("bench.dlq")
    for name, parts in ((topic, 4), (dlq, 1)):
        admin.create_topics([NewTopic(name, num_partitions=parts, replication_factor=1)])[
            name
        ].result(30)
    engine = make_engine(f"sqlite:///{tmp / unique_name('b')}.sqlite")
    group = unique_name("bench.gw")
    handler = _Handler({"K-3"} if poison else set())
    ports = FailurePorts(
        writer=DeadLetterWriter(bootstrap, TopicNames(), "bench", group=group, topic=dlq),
        store=QuarantineStore(engine),
    )
    rt = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=bootstrap,
            group_id=group,
            topics=(topic,),
            retry=BackoffPolicy(base_s=0.05, max_s=0.2, max_attempts=3, jitter=0),
        ),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=ports,
        quarantine=ports,
    )
    rt.subscribe()
    while not rt.consumer.assignment():  # join first: latency must not include the join
        rt.step()

    def produce() -> None:
        producer = Producer(producer_config(bootstrap))
        for i in range(n):
            key = "K" if i % 10 == 0 else f"k{i % 10}"
            producer.produce(
                topic,
                key=key.encode(),
                value=b"x",
                headers=[("msgId", f"{key}-{i // 10}".encode())],
            )
            producer.poll(0)
            time.sleep(1 / rate)
        producer.flush(30)

    thread = threading.Thread(target=produce)
    thread.start()
    others = n - n // 10
    deadline = time.monotonic() + 120
    while len(handler.latency_ms) < others and time.monotonic() < deadline:
        rt.step()
    thread.join()
    rt.close()
    engine.dispose()
    return _p99(handler.latency_ms)


def _park_vs_insert(n: int, tmp: Path) -> float:
    engine = make_engine(f"sqlite:///{tmp / 'park.sqlite'}")
    md = MetaData()
    plain = Table(
        "bench_plain",
        md,
        Column("id", Integer, primary_key=True),
        Column("key", String(64)),
        Column("seq", Integer),
        Column("value", LargeBinary),
    )
    md.create_all(engine)
    store = QuarantineStore(engine)
    scope = Scope("g", "t")

    def rec(i: int) -> Record:
        return Record(
            topic="t",
            partition=0,
            offset=i,
            timestamp_ms=1,
            key=b"K",
            headers=(("msgId", b"m"),),
            value=b"v" * 200,
        )

    with Session(engine) as s, s.begin():
        store.quarantine(s, scope, "K", reason="X", dead_letter_ref="d", record=rec(0))

    def parks() -> None:
        for i in range(1, n + 1):
            with Session(engine) as s, s.begin():
                store.park(s, scope, "K", rec(i))

    def inserts() -> None:
        for i in range(n):
            with Session(engine) as s, s.begin():
                s.execute(insert(plain).values(key="K", seq=i, value=b"v" * 200))

    t_park, t_plain = _timed(parks), _timed(inserts)
    engine.dispose()
    return t_park / t_plain


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-failures-") as d:
        tmp = Path(d)
        out["park_vs_insert"] = round(_park_vs_insert(200 if quick else 1000, tmp), 2)
        engine = make_engine(f"sqlite:///{tmp / 'q.sqlite'}")
        store = QuarantineStore(engine)
        scope = Scope("g", "t")
        store.refresh(scope)
        bare = {"K"}
        t_store = timeit.timeit(lambda: store.is_quarantined(scope, "x"), number=200_000)
        t_set = timeit.timeit(lambda: "x" in bare, number=200_000)
        out["is_quarantined_vs_set"] = round(t_store / t_set, 2)
        engine.dispose()
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        if bootstrap:
            n, rate = (1000, 400.0) if quick else (4000, 400.0)
            base = _run_latency(bootstrap, n, rate, False, tmp)
            poisoned = _run_latency(bootstrap, n, rate, True, tmp)
            out.update(
                records=n,
                rate_per_s=rate,
                p99_no_poison_ms=round(base, 1),
                p99_poison_ms=round(poisoned, 1),
                poison_p99_ratio=round(poisoned / base, 2),
            )
    return out
