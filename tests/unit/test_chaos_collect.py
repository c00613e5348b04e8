"""The chaos collector reads a real (SQLite) gateway store the way the driver does after
heal-and-drain: held rows, FAILED receipts, dead letters with their reason, unshipped rows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.orm import Session

from pipeline import schemas
from pipeline.chaos import collect
from pipeline.chaos.checker import check
from pipeline.failures.dlq import DLQ_HEADER, SCHEMA
from pipeline.host.held import held_table
from pipeline.outbox import writer
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.store import make_engine

DLQ = "t.fleet.dlq"


def _held(c: Any, mid: str, recipient: str, kind: str, body: bytes = b"0") -> None:
    now = int(time.time() * 1000)
    c.execute(insert(held_table).values(
        recipient=recipient, msg_id=mid, kind=kind, sender="x", body=body, ts_ms=now,
        expires_at_ms=now + 60_000, held_at_ms=now))  # fmt: skip


def test_a_store_reads_back_as_history_rows_the_checker_accepts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    engine = make_engine(url)
    failed = schemas.encode("failed", {"msg_id": "b1", "recipient": "worker-b",
        "reason": "INJECT_TIMEOUT", "error": "", "stage": "timeout", "failed_at_ms": 1})  # fmt: skip
    ctx = schemas.encode(SCHEMA, {"reason": "EXPIRED", "error": "", "topic": "t", "partition": 0,
        "offset": 1, "timestamp_ms": 1, "attempts": 1, "first_failure_ms": 1,
        "last_failure_ms": 1, "gateway": "B", "group": None, "verified": True,
        "quarantined": False, "dead_lettered_ms": 1})  # fmt: skip
    with engine.begin() as c:
        _held(c, "r0", "main-b", "REPLY")
        _held(c, "failed-b1", "main-a", "FAILED", failed)
    with engine.begin() as c:
        with Session(bind=c) as s:
            writer.write(s, topic=DLQ, key=b"main-b", value=b"1", branch_key="dlq>B",
                         headers=[("msgId", b"r1"), (DLQ_HEADER, ctx)])  # fmt: skip
            writer.write(s, topic="t.inbox.B", key=b"main-b", value=b"2", branch_key="a>b",
                         headers=[("msgId", b"r2")])  # fmt: skip
            writer.write(s, topic="t.inbox.B", key=b"main-b", value=b"3", branch_key="a>c",
                         headers=[("msgId", b"r3")])  # fmt: skip
            s.flush()
        c.execute(update(outbox).where(outbox.c.value == b"3").values(
            status=int(RowStatus.FAILED), error="RECORD_TOO_LARGE"))  # fmt: skip
    engine.dispose()

    held = list(collect.held_rows(url, "main-b"))
    assert [(r["op"], r["msgId"], r["drained"]) for r in held] == [("held", "r0", False)]
    assert [(r["msgId"], r["reason"]) for r in collect.failed_receipts(url, "main-a")] == [
        ("b1", "INJECT_TIMEOUT")
    ]
    rows = list(collect.outbox_rows(url, DLQ, "B"))
    assert [(r["op"], r["msgId"], r.get("reason")) for r in rows] == [
        ("dead_letter", "r1", "EXPIRED"),
        ("unshipped", "r2", None),
        ("rejected", "r3", "RECORD_TOO_LARGE"),
    ]
    assert collect.held_count(url, "main-a", "FAILED") == 1
    sends = [{"op": "send", "msgId": m, "from": "main-a", "to": to, "seq": i, "path": p}
             for m, to, i, p in (("r0", "main-b", 0, "pull"), ("r1", "main-b", 1, "pull"),
                                 ("r2", "main-b", 2, "pull"), ("r3", "main-b", 3, "pull"),
                                 ("b1", "worker-b", 0, "inject"))]  # fmt: skip
    v = check([*sends, *held, *collect.failed_receipts(url, "main-a"), *rows])
    assert v.ok, v.findings
    assert (v.lost, v.unseen) == (0, 1)


def _held_turn(c: Any, mid: str, recipient: str, kind: str, turn: str) -> None:
    now = int(time.time() * 1000)
    c.execute(insert(held_table).values(
        recipient=recipient, msg_id=mid, kind=kind, sender="x", body=b"", ts_ms=now,
        expires_at_ms=now + 60_000, held_at_ms=now, turn_id=turn))  # fmt: skip


def test_conversations_broadcasts_and_run_rows_read_back_for_the_checker(tmp_path: Path) -> None:
    from pipeline.runs import RunJournal

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    engine = make_engine(url)
    with engine.begin() as c:
        _held_turn(c, "a0", "worker-a", "ANSWER", "t0")
        _held_turn(c, "nw", "worker-a", "NO_WAITER", "t1")
        _held(c, "x0", "worker-a", "BROADCAST")
        _held_turn(c, "tl", "main-b", "TOO_LATE", "t2")
    journal = RunJournal(topic="t.pool.runs")
    with engine.begin() as c:
        with Session(bind=c) as s:
            writer.write(s, topic="t.inbox.A", key=b"broadcast.crew", value=b"1",
                         branch_key="A>broadcast.crew@A", headers=[("msgId", b"x0")])  # fmt: skip
            writer.write(s, topic="t.inbox.B", key=b"broadcast.crew", value=b"1",
                         branch_key="A>broadcast.crew@B", headers=[("msgId", b"x0")])  # fmt: skip
            journal.start(s, tenant="c", run_id="r0")
            first = journal.step(s, tenant="c", run_id="r0", state={"n": 1})
            journal.step(s, tenant="c", run_id="r0", state={"n": 2})
            s.flush()
        c.execute(update(outbox).where(outbox.c.lsn == first.lsn,
            outbox.c.branch_key == first.branch_key).values(status=int(RowStatus.SENT)))  # fmt: skip
    engine.dispose()

    rows = [*collect.held_rows(url, "worker-a"), *collect.held_rows(url, "main-b")]
    assert [(r["op"], r.get("msgId"), r.get("turnId"), r.get("reason")) for r in rows] == [
        ("held", "a0", "t0", None),
        ("no_waiter", None, "t1", "NO_WAITER"),
        ("held", "x0", None, None),
        ("too_late", None, "t2", "TOO_LATE"),
    ]
    assert collect.held_turns(url, "worker-a") == {"t0", "t1"}
    inboxes = {"t.inbox.A": "A", "t.inbox.B": "B"}
    assert [(r["msgId"], r["host"]) for r in collect.staged_rows(url, b"broadcast.crew", inboxes)
            ] == [("x0", "A"), ("x0", "B")]  # fmt: skip
    runs = [r for r in collect.outbox_rows(url, DLQ, "B", "t.pool.runs") if "branchKey" in r]
    assert [(r["op"], r["branchKey"], r["lsn"]) for r in runs] == [("run_unshipped", "c/r0/b1", 2)]
    assert collect.pending_rows(url, "t.pool.runs") == 1
