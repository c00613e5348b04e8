"""A batch of receipts is read and settled in a few statements, and ends exactly as one read and
one settle per receipt did (R-ACK-5: a tracked send is settled once; a FAILED the deadline
already gave is not given twice)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Connection, create_engine, select
from sqlalchemy.orm import Session

from pipeline.control import SPAWN
from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import failed_body, injected_body
from pipeline.envelope.verify import Verified
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host import deadlines
from pipeline.host.held import held_table
from pipeline.host.tracking import FORWARD, forward_table
from pipeline.presence.model import Delivery
from pipeline.runtime import Record, Staged
from pipeline.runtime.outcomes import Ack
from pipeline.store import make_engine, session_factory

KINDS = (FORWARD, SPAWN)
ANSWERS = [
    deadlines.Answer("f1", True, ""),
    deadlines.Answer("f2", False, "INJECT_FAILED"),
    deadlines.Answer("f1", False, "INJECT_FAILED"),  # a second answer: finds f1 settled
    deadlines.Answer("s1", True, ""),
    deadlines.Answer("f3", True, ""),  # failed already: stays failed
    deadlines.Answer("nope", True, ""),  # tracked nowhere
    deadlines.Answer("s2", False, "SPAWN_FAILED"),
    deadlines.Answer("s2", True, ""),
]


def _store(path: Path | str) -> Any:
    """Tracked sends of two kinds in a store (a path: SQLite; else a store URL)."""
    url = f"sqlite:///{path}" if isinstance(path, Path) else path
    sessions = session_factory(make_engine(url))
    common = {"trace_id": "t", "sent_ms": 1, "deadline_ms": 10_000}
    with sessions.begin() as s:
        for msg_id in ("f1", "f2", "f3"):
            deadlines.track(s, FORWARD, msg_id=msg_id, sender="main-a", recipient="w-1",
                            **common)  # fmt: skip
        for msg_id in ("s1", "s2"):
            deadlines.track(s, SPAWN, msg_id=msg_id, spawn_id=f"w-{msg_id}", requester="main-a",
                            host="B", profile="shell", **common)  # fmt: skip
        deadlines.settle(s, FORWARD, "f3", deadlines.FAILED, "INJECT_TIMEOUT")
    return sessions


def stub_inbox_handler(host: str, entity: Any, *, reads: Any, **kw: Any) -> InboxHandler:
    """An ``InboxHandler`` of ``host`` whose every entity is ``entity``: only the parts a test
    passes (``kw``) are real; the verifier, publisher, conversations and injections are not."""
    parts: dict[str, Any] = {
        "verifier": None,
        "publisher": None,
        "conversations": None,
        "injections": None,
        "metrics": GatewayMetrics(CollectorRegistry()),
        "seen": SimpleNamespace(add_all=lambda ids: None),
    }
    parts.update(kw)
    return InboxHandler(
        host=host, entities=SimpleNamespace(get=lambda gid: entity), reads=reads, **parts
    )


def pull_handler(reads: Any, *, tracked: Any, **kw: Any) -> InboxHandler:
    """Host A's inbox handler for receipts to its pull entity main-a: only the parts a receipt
    uses are real; its held counts start at 0 and are counted by its holds, not read."""
    entity = SimpleNamespace(gid="main-a", delivery=Delivery.PULL)
    handler = stub_inbox_handler("A", entity, reads=reads, tracked=tracked, **kw)
    handler._held.refreshed = float("inf")  # the pending counts: not what these tests read
    return handler


def _rows(sessions: Any) -> list[tuple[str, str, str | None]]:
    with sessions() as s:
        return sorted(
            (str(r.msg_id), str(r.state), r.reason)
            for kind in KINDS
            for r in s.execute(select(kind.table))
        )


def test_a_batch_of_answers_settles_the_rows_as_one_settle_per_answer_did(tmp_path: Path) -> None:
    one_by_one, batched = _store(tmp_path / "one.sqlite"), _store(tmp_path / "many.sqlite")
    with one_by_one.begin() as s:
        for a in ANSWERS:
            deadlines.settle_answer(s, KINDS, a.msg_id, injected=a.injected, reason=a.reason)
    with batched.begin() as s:
        deadlines.settle_answers(s.connection(), KINDS, ANSWERS)
    assert _rows(batched) == _rows(one_by_one)
    assert ("f1", "injected", None) in _rows(batched), "the first answer about f1 settled it"
    assert ("s2", deadlines.FAILED, "SPAWN_FAILED") in _rows(batched)


def test_the_states_of_many_sends_are_read_as_one_at_a_time(store_url: str) -> None:
    """On both stores (on PostgreSQL one statement for every kind, as the batch's first or a
    later statement of its transaction)."""
    sessions = _store(store_url)
    ids = ["f1", "f3", "s2", "nope", "f1"]
    for first in (True, False):
        with sessions() as s:
            if not first:
                deadlines.answered(s, KINDS, "f2")  # the transaction has begun
            many = deadlines.states_of(s.connection(), KINDS, ids)
            assert many == {m: deadlines.tracked_send(s, KINDS, m) for m in ids}
        assert many["f3"] == (deadlines.FAILED, None) and many["nope"] is None
        assert many["s2"].state == many["f1"].state == deadlines.PENDING


def test_consecutive_batched_calls_run_as_one_in_staging_order() -> None:
    seen: list[Any] = []

    def many(_conn: Connection, items: list[Any]) -> None:
        seen.append(list(items))

    def other(tag: str) -> Any:
        return lambda _s: seen.append(tag)

    tx = Staged()
    tx.call_each(many, 1)
    tx.call_each(many, 2)
    tx.call(other("x"))
    tx.call_each(many, 3)
    mark = tx.mark()
    tx.call_each(many, 4)  # a record that did not end in Ack: discarded with its staging
    tx.rollback(mark)
    engine = create_engine("sqlite://")
    with Session(engine) as session:  # no inserts: batched calls get its connection
        tx.flush(session)
    engine.dispose()
    assert seen == [[1, 2], "x", [3]]


def test_the_inbox_reads_a_batchs_receipts_ahead_in_its_transaction(store_url: str) -> None:
    """The handler takes each receipt's state from the batch read: no read of its own (its
    read sessions fail here), and the rows end as the one-by-one path leaves them. In the
    runtime's batch transaction, read before the dedupe claim (on PostgreSQL the read goes in
    the claim's round trip)."""
    from pipeline.runtime.batch_session import BatchSessions
    from pipeline.runtime.dedupe import claim_ids

    sessions = _store(store_url)

    def no_reads() -> Any:
        raise AssertionError("a receipt read on its own, not ahead")

    handler = pull_handler(no_reads, tracked=KINDS)
    bodies = [
        (Kind.INJECTED, injected_body("f1", "w-1")),
        (Kind.FAILED, failed_body("f2", "w-1", reason="INJECT_FAILED", error="e", stage="")),
        (Kind.FAILED, failed_body("f3", "w-1", reason="INJECT_FAILED", error="e", stage="")),
        (Kind.INJECTED, injected_body("f3", "w-1")),
        (Kind.INJECTED, injected_body("s1", "w-s1")),
    ]
    records, envs = [], []
    for offset, (kind, body) in enumerate(bodies):
        env = Envelope.new(kind=kind, sender="B._gateway", to="main-a", ttl_s=60, body=body)
        rec = Record(topic="inbox.A", partition=0, offset=offset, key=b"main-a", value=b"",
                     headers=(), timestamp_ms=0)  # fmt: skip
        handler._prepared[(rec.topic, rec.partition, rec.offset)] = Verified(env, "B", "k")
        records.append(rec)
        envs.append(env)
    tx = Staged()
    batches = BatchSessions(sessions)
    try:
        with batches.begin() as s:
            handler.read_ahead(s, records)  # as the runtime runs it: before the claim
            assert claim_ids(s.connection(), "scope", ["r1"], 1) == {"r1"}
            outcomes = [handler.handle(rec, tx) for rec in records]
            tx.flush(s)
    finally:
        batches.close()
    assert all(isinstance(o, Ack) for o in outcomes)
    assert ("f1", "injected", None) in _rows(sessions)
    assert ("f2", deadlines.FAILED, "INJECT_FAILED") in _rows(sessions)
    assert ("f3", deadlines.LATE, "INJECT_TIMEOUT") in _rows(sessions), "the late INJECTED"
    assert ("s1", SPAWN.answered, None) in _rows(sessions)
    with sessions() as s:
        held = {r.msg_id for r in s.execute(select(held_table.c.msg_id))}
        assert s.execute(select(forward_table)).all()
    want = {e.msg_id for i, e in enumerate(envs) if i != 2}
    assert held == want, "the FAILED the deadline already gave (f3) is not held twice"
