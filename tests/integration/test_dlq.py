"""Dead-letter topic on a real broker: verbatim original + context, blocking writer, ops CLI,
and replay (R-DLQ-1, R-DLQ-3: a DLQ with error context and an owner's replay tool)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.errors import BrokerError
from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DLQ_HEADER, DeadLetterWriter
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.testing import BrokerHandle

from .dlq_helpers import dead_letter_all, high_watermarks, produce_originals, read_all

pytestmark = pytest.mark.kafka
runner = CliRunner()


def test_dead_letter_keeps_the_original_verbatim_and_adds_full_context(
    kafka: BrokerHandle, new_topic
) -> None:
    source, dlq = new_topic("src", partitions=3), new_topic("dlq", partitions=2)
    produce_originals(kafka.bootstrap, source, 6, 2, kind=b"SEND", **{"from": b"a@h2"})
    originals = dead_letter_all(
        kafka.bootstrap, source, dlq, 6, reason="SIG_INVALID", error="x" * 5000
    )
    views = list(dlq_ops.scan(kafka.bootstrap, dlq))
    assert len(views) == 6
    by_msg = {v.msg_id: v for v in views}
    for msg in originals:
        v = by_msg[dict(msg.headers())["msgId"].decode()]
        assert v.key == msg.key() and v.value == msg.value()
        assert v.headers == list(msg.headers())  # same headers, same order, nothing added
        c = v.context
        assert (c["topic"], c["partition"], c["offset"]) == (source, msg.partition(), msg.offset())
        assert c["timestamp_ms"] == msg.timestamp()[1]
        assert (c["reason"], c["attempts"], c["gateway"], c["group"]) == (
            "SIG_INVALID",
            5,
            "h1",
            "g1",
        )
        assert c["first_failure_ms"] <= c["last_failure_ms"] and c["verified"] is False
        assert len(c["error"].encode()) <= 1024
        assert v.kind == "SEND" and v.sender == "a@h2"
    # keyed by the original key: one key's dead letters share one DLQ partition
    parts: dict[bytes | None, set[int]] = defaultdict(set)
    for v in views:
        parts[v.key].add(v.dlq_partition)
    assert all(len(p) == 1 for p in parts.values())
    raw = read_all(kafka.bootstrap, dlq, 1)[0]
    assert [k for k, _ in raw.headers()].count(DLQ_HEADER) == 1


def test_writer_blocks_and_raises_retriable_when_the_broker_does_not_confirm(
    kafka: BrokerHandle,
) -> None:
    producer = Producer(producer_config(kafka.bootstrap, **{"message.timeout.ms": 2000}))
    writer = DeadLetterWriter(producer, TopicNames(prefix="test.missing."), "h1", timeout_s=10)
    with pytest.raises(BrokerError) as info:
        writer.send(
            FailureContext(
                record=Record(
                    topic="t",
                    partition=0,
                    offset=1,
                    timestamp_ms=1,
                    key=b"k",
                    headers=(),
                    value=b"v",
                ),
                reason="X",
                error="e",
                first_failure_ms=1,
                last_failure_ms=1,
            )
        )
    assert info.value.retriable and info.value.reason == "DLQ_WRITE_FAILED"


def test_cli_ls_show_and_filters(kafka: BrokerHandle, new_topic) -> None:
    source, dlq = new_topic("src"), new_topic("dlq")
    produce_originals(kafka.bootstrap, source, 5, 2, kind=b"ASK")
    dead_letter_all(kafka.bootstrap, source, dlq, 5, reason="EXPIRED")
    base = ["dlq", "ls", "--bootstrap", kafka.bootstrap, "--dlq-topic", dlq, "--json"]
    out = runner.invoke(app, base)
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [r["headers"]["msgId"] for r in rows] == [f"m-{i}" for i in range(5)]
    assert {r["reason"] for r in rows} == {"EXPIRED"}
    only = json.loads(runner.invoke(app, [*base, "--key", "key-1"]).stdout)
    assert [r["headers"]["msgId"] for r in only] == ["m-1", "m-3"]
    assert json.loads(runner.invoke(app, [*base, "--reason", "OTHER"]).stdout) == []
    assert len(json.loads(runner.invoke(app, [*base, "--limit", "2"]).stdout)) == 2
    table = runner.invoke(app, base[:-1])
    assert table.exit_code == 0 and "5 dead letter(s)" in table.stdout
    shown = runner.invoke(
        app, ["dlq", "show", f"{dlq}:0:3", "--bootstrap", kafka.bootstrap, "--json", "--body"]
    )
    assert shown.exit_code == 0, shown.output
    one = json.loads(shown.stdout)
    assert one["headers"]["msgId"] == "m-3" and one["body"] == "body-3" and one["offset"] == 3
    missing = runner.invoke(
        app, ["dlq", "show", "0:99", "--bootstrap", kafka.bootstrap, "--dlq-topic", dlq]
    )
    assert missing.exit_code == 1


def test_replay_of_1000_keeps_per_key_order_and_a_second_replay_has_no_effect(
    kafka: BrokerHandle, new_topic
) -> None:
    """R-DLQ-3: replay is safe only because consumers are idempotent. Replay 1,000 dead letters
    over 7 keys twice; a consumer with a msgId dedupe set applies each exactly once, in per-key
    order."""
    n, keys = 1000, 7
    source, dlq = new_topic("src", partitions=4), new_topic("dlq", partitions=3)
    produce_originals(kafka.bootstrap, source, n, keys)
    dead_letter_all(kafka.bootstrap, source, dlq, n)
    start = high_watermarks(kafka.bootstrap, source)  # the consumer sees replays only

    cmd = ["dlq", "replay", "--bootstrap", kafka.bootstrap, "--dlq-topic", dlq, "--json"]
    for _ in range(2):
        out = runner.invoke(app, cmd)
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout) == {"replayed": n, "by_topic": {source: n}, "skipped": 0}

    got = read_all(kafka.bootstrap, source, 2 * n, start=start)
    assert len(got) == 2 * n
    seen: set[str] = set()
    applied: dict[bytes, list[int]] = defaultdict(list)
    duplicates = 0
    for msg in got:  # the consumer: dedupe on msgId, then apply
        headers = dict(msg.headers())
        msg_id = headers["msgId"].decode()
        if msg_id in seen:
            duplicates += 1
            continue
        seen.add(msg_id)
        applied[msg.key()].append(int(headers["seq"]))
    assert len(seen) == n and duplicates == n  # every record applied once, the rest absorbed
    for key, seqs in applied.items():
        assert seqs == list(range(len(seqs))), key  # per-key order of the original sends
    assert sum(len(s) for s in applied.values()) == n and len(applied) == keys


def test_replay_with_db_skips_quarantined_keys(kafka: BrokerHandle, new_topic, tmp_path) -> None:
    """A quarantined key is released by its owner, in order; replaying its dead letter through
    the topic would park it behind later records, so replay --store-url skips it."""
    from sqlalchemy.orm import Session

    from pipeline.failures.quarantine import QuarantineStore, Scope
    from pipeline.store import make_engine

    source, dlq = new_topic("src"), new_topic("dlq")
    produce_originals(kafka.bootstrap, source, 6, 3)
    dead_letter_all(kafka.bootstrap, source, dlq, 6)
    db = f"sqlite:///{tmp_path / 'q.sqlite'}"
    engine = make_engine(db)
    with Session(engine) as s, s.begin():
        QuarantineStore(engine).quarantine(
            s,
            Scope("g", "*"),
            "key-1",
            reason="X",
            dead_letter_ref="r",
            record=Record(
                topic=source,
                partition=0,
                offset=1,
                timestamp_ms=1,
                key=b"key-1",
                headers=(),
                value=b"",
            ),
        )
    engine.dispose()
    start = high_watermarks(kafka.bootstrap, source)
    out = runner.invoke(
        app,
        [
            "dlq",
            "replay",
            "--bootstrap",
            kafka.bootstrap,
            "--dlq-topic",
            dlq,
            "--store-url",
            db,
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"replayed": 4, "by_topic": {source: 4}, "skipped": 2}
    got = read_all(kafka.bootstrap, source, 4, start=start)
    assert sorted(m.key() for m in got) == [b"key-0", b"key-0", b"key-2", b"key-2"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.kcat
def test_an_independent_client_sees_the_original_key_headers_and_body(
    kafka: BrokerHandle, new_topic
) -> None:
    source, dlq = new_topic("src"), new_topic("dlq")
    produce_originals(kafka.bootstrap, source, 3, 3, kind=b"SEND")
    dead_letter_all(kafka.bootstrap, source, dlq, 3)
    out = subprocess.run(
        ["kcat", "-C", "-b", kafka.bootstrap, "-t", dlq, "-e", "-q", "-f", "%k\\t%s\\t%h\\n"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode("utf-8", "replace")
    lines = [line.split("\t") for line in out.splitlines() if line]
    assert [(k, v) for k, v, _ in lines] == [(f"key-{i}", f"body-{i}") for i in range(3)]
    for i, (_, _, headers) in enumerate(lines):
        assert headers.startswith(f"msgId=m-{i},seq=0,kind=SEND,fleet.dlq=")
