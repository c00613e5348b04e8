"""``fleet top``'s per-entity counts and ``fleet trace``'s trail on SQLite and PostgreSQL,
over rows shaped like the gateway's (held store, forward tracking, inject journal, outbox)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, insert

from pipeline.envelope.receipts import failed_body, injected_body
from pipeline.host.held import held_table
from pipeline.host.inject_journal import journal_table
from pipeline.host.tracking import forward_table
from pipeline.observability.message_trail import message_trail
from pipeline.observability.store_reader import StoreReader
from pipeline.outbox import write
from pipeline.store import make_engine, session_factory
from tests.contract.test_gateway_store import _held

NOW = int(time.time() * 1000)


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    made = make_engine(store_url)
    yield made
    made.dispose()


def _forward(msg_id: str, sender: str, state: str) -> dict[str, object]:
    return {"msg_id": msg_id, "sender": sender, "recipient": "w", "trace_id": "tr",
            "sent_ms": NOW, "deadline_ms": NOW + 30_000, "state": state, "reason": None}  # fmt: skip


def _journal(msg_id: str, gid: str, state: str) -> dict[str, object]:
    return {"msg_id": msg_id, "gid": gid, "sender": "m", "reply_host": "A", "trace_id": "tr",
            "opened_ms": NOW, "closed_ms": None if state == "open" else NOW + 5, "state": state}  # fmt: skip


def test_counts_per_entity_leave_out_drained_settled_and_closed_rows(engine: Engine) -> None:
    with session_factory(engine).begin() as s:
        s.execute(insert(held_table), [_held("main-a", "1"), _held("main-a", "2"),
                                       _held("main-b", "4")])  # fmt: skip
        s.execute(insert(held_table), {**_held("main-a", "3"), "drained_at_ms": NOW})
        s.execute(insert(forward_table), [_forward("f1", "main-a", "pending"),
                                          _forward("f2", "main-a", "injected")])  # fmt: skip
        s.execute(insert(journal_table), [_journal("j1", "w", "open"),
                                          _journal("j2", "w", "injected")])  # fmt: skip
    reader = StoreReader(engine)
    counts = reader.entity_counts()
    assert (counts["main-a"].held, counts["main-a"].in_flight) == (2, 1)
    assert counts["main-b"].held == 1 and counts["w"].injecting == 1
    view = reader.host_view(NOW)
    assert view.counts == counts and view.stale  # no gateway ever wrote its roster view here
    assert reader.held_messages() == 3, "the exporter's gauge reads the same rows"


def test_an_empty_store_has_no_counts(engine: Engine) -> None:
    assert StoreReader(engine).entity_counts() == {}


def test_trail_joins_outbox_tracking_journal_and_receipts_by_msgid(engine: Engine) -> None:
    headers = [("kind", b"SEND"), ("msgId", b"m-1"), ("traceId", b"tr"), ("to", b"w")]
    other = [("kind", b"SEND"), ("msgId", b"m-10"), ("traceId", b"tr2"), ("to", b"w")]
    receipt = [("kind", b"INJECTED"), ("msgId", b"r-1"), ("traceId", b"tr"), ("to", b"m")]
    with session_factory(engine).begin() as s:
        write(s, topic="t", key=None, value=b"x", headers=headers, branch_key="b")
        write(s, topic="t", key=None, value=b"x", headers=other, branch_key="b")
        write(s, topic="t", key=None, value=injected_body("m-1", "w"), headers=receipt,
              branch_key="r")  # fmt: skip
        s.execute(insert(forward_table), [_forward("m-1", "m", "injected")])
        s.execute(insert(journal_table), [_journal("m-1", "w", "injected")])
        failed = {**_held("m", "failed-m-1"), "kind": "FAILED", "trace_id": "tr",
                  "body": failed_body("m-1", "w", reason="TTL_TOO_LONG", error="e", stage="dlq")}  # fmt: skip
        s.execute(insert(held_table), [failed])
    trail = message_trail(engine, "m-1", where="A")
    whats = [e.what for e in trail]
    assert whats.count("outbox") == 2, "the message's row and its receipt's, not m-10's"
    assert {"tracked", "inject", "held"} <= set(whats)
    assert [e.at_ms for e in trail] == sorted(e.at_ms for e in trail)
    assert {e.trace_id for e in trail if e.trace_id} == {"tr"}
    assert any("reason TTL_TOO_LONG" in e.detail for e in trail if e.what == "held")
    assert message_trail(engine, "nope", where="A") == []


def test_trail_finds_an_injected_inside_a_receipts_row_by_the_briefs_trace(engine: Engine) -> None:
    """A burst's INJECTEDs for one sender are one RECEIPTS row (docs/gateway.md "Receipts"),
    whose own trace id is not the brief's: the trail finds the item about the brief in it."""
    from pipeline.envelope import Envelope, Kind
    from pipeline.envelope.receipts import receipts_envelope

    def injected(about: str, trace: str) -> Envelope:
        return Envelope.new(kind=Kind.INJECTED, sender="B._gateway", to="m", ttl_s=60,
                            trace_id=trace, body=injected_body(about, "w"))  # fmt: skip

    items = [injected("m-0", "tr0"), injected("m-1", "tr"), injected("m-2", "tr2")]
    batch = receipts_envelope(items, sender="B._gateway", ttl_s=60)
    headers = [("kind", b"RECEIPTS"), ("msgId", batch.msg_id.encode()),
               ("traceId", batch.trace_id.encode()), ("to", b"m")]  # fmt: skip
    with session_factory(engine).begin() as s:
        write(s, topic="t", key=None, value=batch.body, headers=headers, branch_key="r")
        s.execute(insert(journal_table), [_journal("m-1", "w", "injected")])
    trail = message_trail(engine, "m-1", where="B")
    outbox = [e for e in trail if e.what == "outbox"]
    assert len(outbox) == 1, "the one row holding the receipt about m-1"
    assert f"INJECTED {items[1].msg_id} in RECEIPTS {batch.msg_id}" in outbox[0].detail
    assert {e.trace_id for e in trail if e.trace_id} == {"tr"}, "the brief's trace, not the row's"
    assert [e.what for e in message_trail(engine, "m-9", where="B")] == []
