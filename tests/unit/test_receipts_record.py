"""RECEIPTS: a burst's INJECTEDs for one sender in one signed record (docs/envelope.md).

R-ACK-4: every injected brief gets its INJECTED, correlated to its msgId. A gateway whose host
takes RECEIPTS (its signed presence says so) is sent the INJECTEDs of one inject burst for one
of its senders as one record; it holds each as the single INJECTED it stands for and settles
each tracked send. A host that does not say so (a release before this one) gets one record each.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, select

from pipeline import schemas
from pipeline.envelope import GATEWAY_KINDS, Envelope, Kind
from pipeline.envelope import reasons as r
from pipeline.envelope.receipts import (
    failed_receipt,
    injected_body,
    read_receipt,
    read_receipts,
    receipts_envelope,
)
from pipeline.envelope.verify import Verified
from pipeline.errors import DeliveryError, EnvelopeError
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host import deadlines
from pipeline.host.held import held_table
from pipeline.host.tracking import FORWARD
from pipeline.outbox.notify import woken_in_process
from pipeline.outbox.tables import outbox
from pipeline.presence import PresenceEntry, RosterView, presence_record
from pipeline.presence.model import GATEWAY_TAKES, TAKES_LABEL, Delivery, Role
from pipeline.record_headers import unpack_headers
from pipeline.runtime import Record, Staged
from pipeline.runtime.batch_session import BatchSessions
from pipeline.runtime.outcomes import Ack, DeadLetter
from pipeline.store import make_engine, session_factory
from tests.envelope_kit import Fleet
from tests.unit.test_inject_journal import queue_into
from tests.unit.test_receipts_batched import pull_handler


def _injected(about: str, to: str = "main-a") -> Envelope:
    return Envelope.new(
        kind=Kind.INJECTED, sender="B._gateway", to=to, body=injected_body(about, "w"), ttl_s=60
    )


# -- the record ---------------------------------------------------------------------------------
def test_a_receipts_record_reads_back_as_the_injecteds_it_carries() -> None:
    items = [_injected(f"brief-{i}") for i in range(3)]
    batch = receipts_envelope(items, sender="B._gateway", ttl_s=60)
    assert batch.kind is Kind.RECEIPTS and batch.to == "main-a"
    assert batch.msg_id not in {e.msg_id for e in items}, "the record is a message of its own"
    got = read_receipts(batch)
    assert [(e.kind, e.msg_id, e.trace_id, e.body) for e in got] == [
        (Kind.INJECTED, e.msg_id, e.trace_id, e.body) for e in items
    ]
    assert {(e.sender, e.to, e.ts_ms, e.expires_at_ms) for e in got} == {
        (batch.sender, batch.to, batch.ts_ms, batch.expires_at_ms)
    }, "each item takes the record's signed from, to, ts and expiresAt"
    assert [read_receipt("INJECTED", e.body).msg_id for e in got] == [
        f"brief-{i}" for i in range(3)
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x01",  # the prefix of version 1 and nothing after it
        schemas.encode("receipts", {"items": []}),
        schemas.encode("receipts", {"items": [{"msg_id": "", "trace_id": "t", "body": b"x"}]}),
    ],
    ids=["empty", "truncated", "no-item", "empty-msg-id"],
)
def test_a_bad_receipts_body_is_refused_with_a_reason(body: bytes) -> None:
    env = Envelope.new(kind=Kind.RECEIPTS, sender="B._gateway", to="main-a", body=body, ttl_s=60)
    with pytest.raises(EnvelopeError) as info:
        read_receipts(env)
    assert info.value.reason in (r.SCHEMA_INVALID, r.MALFORMED_HEADERS)


@pytest.mark.parametrize("kind", sorted(GATEWAY_KINDS))
def test_receipts_signed_by_an_agent_are_refused_and_by_its_gateway_verify(kind: Kind) -> None:
    """Only a gateway sends a receipt (INJECTED, FAILED) or batches them (RECEIPTS): an agent
    that sends one (a v0.12 socket takes any kind) would settle another sender's tracked sends;
    refused UNKNOWN_KIND at verification."""
    f = Fleet()
    body = {
        Kind.RECEIPTS: receipts_envelope([_injected("x", to="m-b")], sender="a._gateway",
                                         ttl_s=60).body,
        Kind.INJECTED: injected_body("x", "w"),
        Kind.FAILED: failed_receipt(about="x", recipient="w", sender="a._gateway", to="m-b",
                                    reason="INJECT_FAILED", error="", stage="inject", ttl_s=60,
                                    trace_id=None).body,
    }[kind]  # fmt: skip
    from_agent = f.envelope(kind=kind, sender="w-a", body=body)
    with pytest.raises(EnvelopeError) as info:
        f.verifier("b").verify(**f.record(from_agent))
    assert info.value.reason == r.UNKNOWN_KIND
    from_gateway = f.envelope(kind=kind, sender="a._gateway", body=body)
    assert f.verifier("b").verify(**f.record(from_gateway)).envelope == from_gateway


# -- who takes it -------------------------------------------------------------------------------
def _roster_with(f: Fleet, entry: PresenceEntry) -> RosterView:
    view = RosterView(verifier=f.verifier("b"), clock_ms=lambda: f.now)
    view.mark_current(f.now)
    key, headers, value = presence_record(entry, signer=f.signers[entry.host], topics=f.topics)
    assert view.apply(topic=f.topics.roster, key=key, headers=headers, value=value) is not None
    return view


def _gateway_entry(f: Fleet, host: str, **kw: Any) -> PresenceEntry:
    return PresenceEntry(gid=f"{host}._gateway", host=host, role=Role.GATEWAY,
                         delivery=Delivery.NONE, ts_ms=f.now, ttl_ms=30_000, **kw)  # fmt: skip


def test_a_gateway_entry_says_what_its_host_takes_inside_the_signed_body() -> None:
    f = Fleet()
    view = _roster_with(f, _gateway_entry(f, "a", takes=GATEWAY_TAKES))
    assert view.takes("a", "RECEIPTS")
    assert not view.takes("c", "RECEIPTS"), "a host with no gateway entry read takes nothing"
    got = view.get("a._gateway")
    assert got is not None and TAKES_LABEL not in got.labels, "a reserved label, not a user's"


def test_a_gateway_entry_without_the_label_an_older_release_takes_nothing_new() -> None:
    """A v0.12 gateway writes no ``fleet.takes``: its peers keep sending it one INJECTED each."""
    f = Fleet()
    view = _roster_with(f, _gateway_entry(f, "a"))
    assert not view.takes("a", "RECEIPTS")
    record = _gateway_entry(f, "a", labels={TAKES_LABEL: "RECEIPTS"}).to_record()
    assert TAKES_LABEL not in record["labels"], "a user's label cannot claim it"


# -- the sender's side: one record per burst and sender ----------------------------------------
@pytest.fixture
def engine(store_url: str) -> Engine:
    e = make_engine(store_url)
    woken_in_process(e)
    yield e  # type: ignore[misc]
    e.dispose()


def _staged(engine: Engine) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Each outbox row in order: (kind, to, [(item msgId or the row's, about msgId)])."""
    out = []
    with engine.connect() as c:
        for row in c.execute(select(outbox.c.headers, outbox.c.value).order_by(outbox.c.id)):
            h = {k: bytes(v).decode("latin-1") for k, v in unpack_headers(bytes(row.headers))}
            env = Envelope(kind=Kind(h["kind"]), msg_id=h["msgId"], trace_id=h["traceId"],
                           sender=h["from"], to=h["to"], ts_ms=int(h["ts"]),
                           expires_at_ms=int(h["expiresAt"]), body=bytes(row.value))  # fmt: skip
            items = read_receipts(env) if env.kind is Kind.RECEIPTS else [env]
            about = [(i.msg_id, read_receipt(i.kind.value, i.body).msg_id) for i in items]
            out.append((env.kind.value, env.to, about))
    return out


def _burst(engine: Engine, briefs: list[Envelope], takes: Any, fail: str = "") -> GatewayMetrics:
    """``briefs``: the first injected alone, held until the rest are queued behind it (one burst);
    ``fail``: the msgId whose inject fails for good (its receipt is a FAILED)."""
    gate, entered = threading.Event(), threading.Event()

    def inject(**kw: Any) -> None:
        entered.set()
        gate.wait(5)
        if kw["msg_id"] == fail:
            raise DeliveryError("no such pane", reason="INJECT_FAILED")

    q, metrics = queue_into(engine, inject, batches_receipts=takes)
    for n, b in enumerate(briefs):
        q.submit("worker-b", b, reply_host="A" if b.sender.endswith("a") else "C")
        if n == 0:
            assert entered.wait(5), "the first inject runs alone"
    gate.set()
    for _ in range(500):
        if q.idle():
            break
        threading.Event().wait(0.01)
    q.stop()
    return metrics


def _brief(sender: str = "main-a") -> Envelope:
    return Envelope.new(kind=Kind.SEND, sender=sender, to="worker-b", ttl_s=60)


def test_a_bursts_injecteds_for_one_sender_travel_as_one_record_where_the_first_was(
    engine: Engine,
) -> None:
    briefs = [_brief() for _ in range(5)]
    metrics = _burst(engine, briefs, takes=lambda host: host == "A", fail=briefs[2].msg_id)
    rows = _staged(engine)
    # the first inject is a burst of its own (held until the rest were queued behind it)
    assert rows[0] == ("INJECTED", "main-a", [(rows[0][2][0][0], briefs[0].msg_id)])
    kinds = [k for k, _, _ in rows[1:]]
    assert kinds == ["RECEIPTS", "FAILED"], "the batch where its first item was; FAILED alone"
    about = [a for _, a in rows[1][2]]
    assert about == [briefs[1].msg_id, briefs[3].msg_id, briefs[4].msg_id]
    assert rows[2][2][0][1] == briefs[2].msg_id
    assert metrics.receipts_batched._value.get() == 3


def test_a_host_that_does_not_take_receipts_gets_one_injected_each(engine: Engine) -> None:
    """The rolling upgrade: a sender on a host whose gateway predates RECEIPTS (or whose
    presence is not read yet) is sent what that release reads."""
    briefs = [_brief() for _ in range(4)] + [_brief("main-c") for _ in range(3)]
    metrics = _burst(engine, briefs, takes=lambda host: host == "C")
    rows = _staged(engine)
    assert [(k, to) for k, to, _ in rows] == [("INJECTED", "main-a")] * 4 + [
        ("RECEIPTS", "main-c")
    ], "A: one each; C's three: one record"
    assert [a for row in rows for _, a in row[2]] == [b.msg_id for b in briefs]
    assert metrics.receipts_batched._value.get() == 3


# -- the reader's side: each item as the INJECTED it stands for --------------------------------
def _handler(sessions: Any, *, max_held: int = 10_000) -> InboxHandler:
    return pull_handler(sessions, tracked=(FORWARD,), max_held_per_recipient=max_held)


def _record(offset: int) -> Record:
    return Record(topic="inbox.A", partition=0, offset=offset, key=b"main-a", value=b"",
                  headers=(), timestamp_ms=0)  # fmt: skip


def _apply(handler: InboxHandler, sessions: Any, envs: list[Envelope]) -> list[Any]:
    """``envs`` as one consumed batch, through the runtime's stages and a real transaction."""
    records = [_record(i) for i in range(len(envs))]
    for rec, env in zip(records, envs, strict=True):
        handler._prepared[(rec.topic, rec.partition, rec.offset)] = Verified(env, "B", "k")
    tx = Staged()
    batches = BatchSessions(sessions)
    outcomes = []
    try:
        with batches.begin() as s:
            handler.read_ahead(s, records)
            for rec in records:
                mark = tx.mark()
                outcome = handler.handle(rec, tx)
                if not isinstance(outcome, Ack):
                    tx.rollback(mark)  # as the runtime does: a record applies whole or not at all
                outcomes.append(outcome)
            tx.flush(s)
    finally:
        batches.close()
    tx.run_effects(committed=True, on_error=lambda *a: None)
    return outcomes


@pytest.fixture
def tracked(store_url: str) -> Any:
    """A's store with five forward sends of main-a, pending."""
    sessions = session_factory(make_engine(store_url))
    with sessions.begin() as s:
        for i in range(5):
            deadlines.track(s, FORWARD, msg_id=f"f{i}", sender="main-a", recipient="w",
                            trace_id="t", sent_ms=1, deadline_ms=10_000)  # fmt: skip
    return sessions


def _held(sessions: Any) -> list[tuple[str, str, str, bytes]]:
    with sessions() as s:
        t = held_table
        rows = s.execute(select(t.c.msg_id, t.c.kind, t.c.trace_id, t.c.body).order_by(t.c.id))
        return [(r.msg_id, r.kind, r.trace_id, bytes(r.body)) for r in rows]


def _states(sessions: Any) -> dict[str, str]:
    with sessions() as s:
        return {r.msg_id: r.state for r in s.execute(select(FORWARD.table))}


def test_the_main_holds_each_item_as_the_single_injected_and_each_send_is_settled(
    tracked: Any,
) -> None:
    single = _injected("f0")
    items = [_injected(f"f{i}") for i in (1, 2, 3)]
    batch = receipts_envelope(items, sender="B._gateway", ttl_s=60)
    handler = _handler(tracked)
    outcomes = _apply(handler, tracked, [single, batch])
    assert all(isinstance(o, Ack) for o in outcomes)
    assert _held(tracked) == [
        (e.msg_id, "INJECTED", e.trace_id, e.body) for e in [single, *items]
    ], "what the four single records would have held, in order"
    assert _states(tracked) == {"f0": "injected", "f1": "injected", "f2": "injected",
                                "f3": "injected", "f4": "pending"}  # fmt: skip
    assert handler.metrics.receipts_unpacked._value.get() == 3


def test_a_receipts_record_past_the_held_cap_is_refused_whole(tracked: Any) -> None:
    """The held cap refuses a record, not part of one: nothing of it is held or settled."""
    items = [_injected(f"f{i}") for i in range(3)]
    handler = _handler(tracked, max_held=2)
    outcomes = _apply(handler, tracked, [receipts_envelope(items, sender="B._gateway", ttl_s=60)])
    assert isinstance(outcomes[0], DeadLetter) and outcomes[0].reason == "HELD_CAP_EXCEEDED"
    assert _held(tracked) == []
    assert set(_states(tracked).values()) == {"pending"}


def test_a_close_retried_after_a_store_hiccup_stages_one_record_and_counts_it_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close is one transaction retried whole (pipeline.store.retry): the attempt that
    failed left no row, and the receipts are counted once, after the commit."""
    from sqlalchemy.exc import OperationalError

    from pipeline.host.outbound import Publisher
    from tests.unit.test_inject_journal import _job

    q, metrics = queue_into(engine, lambda **kw: None, batches_receipts=lambda host: True)
    briefs = [_brief() for _ in range(3)]
    jobs = [_job(b) for b in briefs]
    opened = q._open_all(jobs)
    done = [(j, q._inject(j, opened=j.envelope.msg_id in opened)) for j in jobs]
    real, calls = Publisher.stage_many, []

    def hiccup(self: Publisher, *a: Any, **kw: Any) -> Any:  # the receipts' write, the rows built
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return real(self, *a, **kw)

    monkeypatch.setattr(Publisher, "stage_many", hiccup)
    q._record(done, [])
    q.stop()
    assert len(calls) == 2, "retried once"
    rows = _staged(engine)
    assert [(k, [a for _, a in about]) for k, _, about in rows] == [
        ("RECEIPTS", [b.msg_id for b in briefs])
    ]
    assert metrics.receipts_batched._value.get() == 3
