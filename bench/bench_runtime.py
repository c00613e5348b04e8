"""The consume runtime vs a hand-written loop and vs faststream, on the same work, in one run.

Work (issue 17's table): N records of 1 KiB over 12 partitions, unsigned; per batch one SQLite
transaction that dedupes each ``msgId`` (a unique row) and writes an effect row, then the offset
commit (commit after processing). Three contenders, each its own consumer group on the same topic:

* ``hand``: confluent-kafka ``consume(500)`` + sqlite3 ``INSERT OR IGNORE`` + synchronous commit —
  the least a careful person would write;
* ``runtime``: :class:`pipeline.runtime.ConsumerRuntime` with a handler that stages the effect row
  (the runtime writes the dedupe rows and commits);
* ``faststream``: faststream's batch subscriber with ``AckPolicy.ACK`` (``faststream_worker.py``)
  in a virtualenv this bench makes under ``bench/.venvs/`` — never a project dependency.

Each contender's clock starts at its first record (after its group join) and stops at its N-th.
Figures are ratios within one repeat: ``runtime_over_hand`` = hand_s / runtime_s (target ≥ 0.85)
and ``runtime_over_faststream`` = faststream_s / runtime_s (target ≥ 3). Three repeats, reported
as min / median / max. ``python -m bench runtime`` (``--quick``: 10k records, 1 repeat).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table

from pipeline.failures.outcomes import ACK, Outcome
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.record import Record
from pipeline.runtime.loop import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.staging import Staged
from pipeline.store import make_engine, metadata, session_factory
from pipeline.testing import unique_name

PARTITIONS = 12
BODY = b"x" * 1024
HERE = Path(__file__).parent
VENV = HERE / ".venvs" / "faststream"

_effects = Table(
    "bench_effect",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("msg_id", String(64)),
    Column("body", LargeBinary),
)


def _broker() -> tuple[str, Any]:
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        return env, None
    from pipeline.testing import start_test_broker

    handle = start_test_broker(name="bench")
    return handle.bootstrap, handle


def _topic(bootstrap: str, n: int) -> str:
    name = unique_name("bench.runtime")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[
        name
    ].result(30)
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    for i in range(n):
        producer.produce(
            name, key=f"k{i % 64}".encode(), value=BODY, headers=[("msgId", f"m{i}".encode())]
        )
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    return name


def _hand(bootstrap: str, topic: str, n: int, db: Path) -> float:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE dedupe (scope TEXT, msg_id TEXT, PRIMARY KEY (scope, msg_id))")
    conn.execute("CREATE TABLE effect (id INTEGER PRIMARY KEY, msg_id TEXT, body BLOB)")
    consumer = Consumer(consumer_config(bootstrap, unique_name("bench.hand")))
    consumer.subscribe([topic])
    seen, first = 0, 0.0
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(500, 0.05) if m.error() is None]
        if not msgs:
            continue
        first = first or time.perf_counter()
        conn.execute("BEGIN")
        for m in msgs:
            msg_id = dict(m.headers())["msgId"].decode()
            if conn.execute("INSERT OR IGNORE INTO dedupe VALUES ('b', ?)", (msg_id,)).rowcount:
                conn.execute("INSERT INTO effect (msg_id, body) VALUES (?, ?)", (msg_id, m.value()))
        conn.execute("COMMIT")
        ends = {(m.topic(), m.partition()): m.offset() + 1 for m in msgs}
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False
        )
        seen += len(msgs)
    elapsed = time.perf_counter() - first
    consumer.close()
    conn.close()
    return elapsed


class _Effect:
    def __init__(self) -> None:
        self.count = 0

    def handle(self, record: Record, tx: Staged) -> Outcome:
        self.count += 1
        tx.insert(_effects, {"msg_id": record.header_str("msgId"), "body": record.value})
        return ACK


class _NoDeadLetters:
    """The bench's records never fail; a dead letter here is a bench bug."""

    def stage(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("bench records never dead-letter")


def _runtime(bootstrap: str, topic: str, n: int, db: Path) -> float:
    engine = make_engine(f"sqlite:///{db}")
    metadata.create_all(engine)
    _effects.create(engine)
    handler = _Effect()
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=unique_name("bench.rt"), topics=(topic,)),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=_NoDeadLetters(),
    )
    rt.subscribe()
    first = 0.0
    deadline = time.monotonic() + 600
    while handler.count < n and time.monotonic() < deadline:
        rt.step()
        if handler.count and not first:
            first = time.perf_counter()
    elapsed = time.perf_counter() - first
    rt.close()
    engine.dispose()
    return elapsed


def _faststream_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "faststream[confluent]"], check=True
        )
    return python


def _faststream(bootstrap: str, topic: str, n: int, db: Path) -> float:
    out = subprocess.run(
        [
            str(_faststream_python()),
            str(HERE / "faststream_worker.py"),
            bootstrap,
            topic,
            unique_name("bench.fs"),
            str(db),
            str(n),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def main(quick: bool) -> dict[str, Any]:
    n, repeats = (10_000, 1) if quick else (50_000, 3)
    bootstrap, handle = _broker()
    runs: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(repeats):
                topic = _topic(bootstrap, n)
                secs = {
                    name: fn(bootstrap, topic, n, Path(tmp) / f"{name}{r}.sqlite")
                    for name, fn in (
                        ("hand", _hand),
                        ("runtime", _runtime),
                        ("faststream", _faststream),
                    )
                }
                runs.append(
                    {
                        **{f"{k}_msg_per_s": round(n / v) for k, v in secs.items()},
                        "runtime_over_hand": secs["hand"] / secs["runtime"],
                        "runtime_over_faststream": secs["faststream"] / secs["runtime"],
                    }
                )
                print(json.dumps(runs[-1]), flush=True)
    finally:
        if handle is not None:
            handle.close()
    return {
        "records": n,
        "partitions": PARTITIONS,
        "runs": runs,
        "runtime_over_hand": _spread([r["runtime_over_hand"] for r in runs]),
        "runtime_over_faststream": _spread([r["runtime_over_faststream"] for r in runs]),
        "targets": {"runtime_over_hand": 0.85, "runtime_over_faststream": 3.0},
    }
