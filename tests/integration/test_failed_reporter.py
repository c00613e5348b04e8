"""The FAILED reporter on a real broker (R-DLQ-4: every dead-lettered delivery is reported
to its sender as FAILED, so the DLQ never becomes a silent loss channel) -- including kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from pipeline import schemas
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.failed_to_topic import TopicFailedSink
from pipeline.failures.reporter import FailedReporter
from pipeline.kafka.settings import consumer_config
from pipeline.kafka.topics import TopicNames
from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.store import make_engine
from pipeline.testing import BrokerHandle, unique_name

from .dlq_helpers import high_watermarks, read_all

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]


def write_dead_letters(bootstrap: str, dlq: str, n: int) -> set[str]:
    """``n`` dead letters of mixed eligibility; returns the msgIds that must get one FAILED.

    Eligible: kind SEND/ASK/SPAWN, a sender, and a verified envelope. Not eligible: REPLY (no
    delivery expected), no ``from``, or unverified (a forged ``from`` must not cause FAILED).
    """
    writer = DeadLetterWriter(bootstrap, TopicNames(), "h1", topic=dlq)
    expected: set[str] = set()
    kinds = ["SEND", "ASK", "SPAWN", "REPLY", "SEND", "SEND"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        verified = i % 5 != 0
        has_from = i % 7 != 0
        headers = [("msgId", f"m-{i}".encode()), ("kind", kind.encode())]
        if has_from:
            headers.append(("from", f"sender-{i % 4}@h2".encode()))
        # verified is derived from the reason (one rule): an authenticity failure is unverified
        writer.send(
            FailureContext(
                record=Record(
                    topic="fleet.inbox.h1",
                    partition=0,
                    offset=i,
                    timestamp_ms=1,
                    key=f"gid-{i % 9}".encode(),
                    headers=tuple(headers),
                    value=b"brief",
                ),
                reason="EXPIRED" if verified else "SIG_INVALID",
                error="too late" if verified else "forged",
                attempts=1,
                first_failure_ms=1,
                last_failure_ms=1,
            )
        )
        if kind != "REPLY" and verified and has_from:
            expected.add(f"m-{i}")
    writer.close()
    return expected


def sink_records(bootstrap: str, sink: str) -> list[tuple[str, dict[str, Any]]]:
    total = sum(high_watermarks(bootstrap, sink).values())
    out = []
    for msg in read_all(bootstrap, sink, total):
        headers = {k: v.decode() for k, v in msg.headers()}
        out.append((headers["msgId"], schemas.decode("failed", msg.value())))
    return out


def test_reporter_emits_once_per_eligible_dead_letter_and_skips_redelivery(
    kafka: BrokerHandle, new_topic, tmp_path: Path
) -> None:
    dlq, sink = new_topic("dlq", partitions=2), new_topic("failed")
    expected = write_dead_letters(kafka.bootstrap, dlq, 60)
    engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    group = unique_name("test.reporter")
    try:
        for _ in range(2):  # the second run re-reads everything (new group): the store dedupes
            consumer = Consumer(consumer_config(kafka.bootstrap, group))
            consumer.subscribe([dlq])
            reporter = FailedReporter(
                consumer=consumer, engine=engine, sink=TopicFailedSink(kafka.bootstrap, sink)
            )
            try:
                reporter.run(idle_exit_s=4)
            finally:
                consumer.close()
            group = unique_name("test.reporter")
    finally:
        engine.dispose()
    got = sink_records(kafka.bootstrap, sink)
    assert sorted(m for m, _ in got) == sorted(f"failed-{m}" for m in expected)
    for msg_id, body in got:
        assert msg_id == f"failed-{body['msg_id']}" and body["reason"] == "EXPIRED"
        assert body["stage"] == "dlq" and body["recipient"].startswith("gid-")


@pytest.mark.slow
def test_reporter_killed_minus_9_mid_way_still_yields_exactly_one_failed_each(
    kafka: BrokerHandle, new_topic, tmp_path: Path
) -> None:
    """Exactly-once EFFECT across kill -9: each eligible dead letter's FAILED reaches the sink
    with msgId failed-<original>. A duplicate is allowed only in the one crash window (emitted,
    not yet recorded) and then carries the SAME msgId, so the receiver's dedupe absorbs it: at
    most one such duplicate per kill, since one record is in flight at a time."""
    dlq, sink = new_topic("dlq", partitions=3), new_topic("failed")
    expected = write_dead_letters(kafka.bootstrap, dlq, 600)
    db = f"sqlite:///{tmp_path / 'reporter.sqlite'}"
    group = unique_name("test.reporter")
    cmd = [
        sys.executable,
        "-m",
        "pipeline",
        "dlq",
        "report",
        "--bootstrap",
        kafka.bootstrap,
        "--store-url",
        db,
        "--dlq-topic",
        dlq,
        "--sink-topic",
        sink,
        "--group",
        group,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    kills = 0
    for round_ in range(2):
        before = sum(high_watermarks(kafka.bootstrap, sink).values())
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                now = sum(high_watermarks(kafka.bootstrap, sink).values())
                if now >= before + 40:
                    break
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        finally:
            proc.wait(timeout=30)
            if proc.stderr:
                proc.stderr.close()
        mid = sum(high_watermarks(kafka.bootstrap, sink).values())
        assert mid < len(expected), f"round {round_}: the kill landed after the work was done"
    done = subprocess.run(
        [*cmd, "--idle-exit", "5"], check=False, env=env, capture_output=True, timeout=180
    )
    assert done.returncode == 0, done.stderr.decode()

    got = sink_records(kafka.bootstrap, sink)
    counts = Counter(m for m, _ in got)
    assert set(counts) == {f"failed-{m}" for m in expected}  # every eligible one, nothing else
    duplicates = {m: c for m, c in counts.items() if c > 1}
    assert sum(c - 1 for c in duplicates.values()) <= kills, duplicates
    for msg_id, body in got:  # a duplicate is the same message: same id, same correlation
        assert msg_id == f"failed-{body['msg_id']}"
