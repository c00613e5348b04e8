"""The inject deadline travels in the signed envelope (R-ACK-5; found by the ``broker-down``
chaos scenario).

R-ACK-5: the forward path is at-most-once and "no INJECTED within a bound = a loud FAILED at
the sender". That FAILED must stay true: a brief that reaches its recipient's gateway after the
inject deadline its sender signed (``expiresAt``) is dead-lettered ``INJECT_DEADLINE_PASSED``,
never injected; the sender's tracker waits ``clock_skew_s`` past that deadline, so a recipient
whose clock lags by up to the skew has refused before the sender is told. A brief injected
just in time whose INJECTED is delayed past the FAILED (the residual window) is recorded as
``late`` loudly, never silently.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.bootstrap.client import build_client
from pipeline.envelope import Envelope, Kind, Signer
from pipeline.envelope.receipts import injected_body
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import past_inject_deadline
from pipeline.host import deadlines, roster_cache
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.host.tracking import FORWARD, forward_table
from pipeline.presence.model import Delivery, Role
from pipeline.reasons import PERMANENT
from pipeline.reasons import Delivery as DeliveryReason
from pipeline.runtime import Record, Staged
from pipeline.runtime.outcomes import DeadLetter
from pipeline.store import make_engine, read_sessions, session_factory
from tests.unit.test_receipts_batched import stub_inbox_handler

FAR = 10**15


def _raise() -> None:
    raise  # noqa: PLE0704 - the follow-up's own error, re-raised into the test


def _client(tmp_path: Path, **kw: Any):  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(
            s,
            [
                roster_cache.RosterEntry("worker-b", "B", "worker", "inject", (), FAR),
                roster_cache.RosterEntry("main-b", "B", "main", "pull", (), FAR),
            ],
        )
    cfg = GatewayConfig(
        host="A",
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
        **kw,
    )
    return build_client(cfg, signer=Signer.generate("A"), engine=engine), engine


def test_a_brief_to_an_inject_recipient_signs_its_inject_deadline_as_expires_at(
    tmp_path: Path,
) -> None:
    client, engine = _client(tmp_path, inject_deadline_s=30, clock_skew_s=5)
    brief = client.send(sender="main-a", to="worker-b", body=b"do it", ttl_s=3600)
    assert brief.expires_at_ms - brief.ts_ms == 30_000, "the inject deadline, not the ttl"
    short = client.send(sender="main-a", to="worker-b", body=b"quick", ttl_s=10)
    assert short.expires_at_ms - short.ts_ms == 10_000, "a shorter ttl still wins"
    reply = client.send(sender="main-a", to="main-b", body=b"r", kind=Kind.REPLY, ttl_s=3600)
    assert reply.expires_at_ms - reply.ts_ms == 3_600_000, "pull path: the ttl as given"
    with session_factory(engine)() as s:
        rows = {r.msg_id: r.deadline_ms for r in s.execute(select(forward_table))}
    assert rows == {
        brief.msg_id: brief.expires_at_ms + 5_000,
        short.msg_id: short.expires_at_ms + 5_000,
    }, "the sender's INJECT_TIMEOUT waits clock_skew_s past the signed deadline"
    engine.dispose()


def test_past_the_deadline_means_strictly_after_expires_at_with_no_skew_allowance() -> None:
    env = Envelope.new(kind=Kind.SEND, sender="a", to="w", ttl_s=30, now_ms=1_000)
    assert not past_inject_deadline(env, now_ms=31_000)
    assert past_inject_deadline(env, now_ms=31_001)


def _handler(tmp_path: Path, *, delivery: str = "inject") -> tuple[InboxHandler, Any, list[Any]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'B.sqlite'}")
    submitted: list[Any] = []
    entity = SimpleNamespace(gid="worker-b", delivery=Delivery(delivery))
    handler = stub_inbox_handler(
        "B",
        entity,
        reads=read_sessions(engine),
        injections=SimpleNamespace(
            submit=lambda gid, env, reply_host: submitted.append(env.msg_id)
        ),
        seen=None,
    )
    return handler, engine, submitted


def _record(env: Envelope) -> Record:
    return Record(topic="inbox.B", partition=0, offset=1, key=env.to.encode(), value=b"",
                  headers=(), timestamp_ms=0)  # fmt: skip


def test_a_brief_arriving_past_its_deadline_is_dead_lettered_not_injected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handler, engine, submitted = _handler(tmp_path)
    late = Envelope.new(kind=Kind.SEND, sender="main-a", to="worker-b", ttl_s=30, now_ms=1_000)
    tx = Staged()
    with caplog.at_level(logging.WARNING):
        out = handler._to_inject(late, _record(late), tx, "A")
    assert isinstance(out, DeadLetter) and out.reason == "INJECT_DEADLINE_PASSED"
    assert out.reason in PERMANENT, "retrying cannot help: the sender gave up"
    tx.run_effects(committed=True, on_error=_raise)
    assert submitted == [], "never submitted for inject"
    assert late.msg_id in caplog.text and "INJECT_DEADLINE_PASSED" in caplog.text
    assert handler.metrics.inject_deadline_passed.labels("inbox")._value.get() == 1
    fresh = Envelope.new(kind=Kind.SEND, sender="main-a", to="worker-b", ttl_s=30)
    tx = Staged()
    assert not isinstance(handler._to_inject(fresh, _record(fresh), tx, "A"), DeadLetter)
    tx.run_effects(committed=True, on_error=_raise)
    assert submitted == [fresh.msg_id], "in time: injected after the commit as before"
    assert DeliveryReason.INJECT_DEADLINE_PASSED == "INJECT_DEADLINE_PASSED"
    engine.dispose()


def test_an_injected_after_the_senders_failed_is_loud_marked_late_and_still_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The residual window: injected just before the deadline, the INJECTED delayed past the
    sender's FAILED. The sender keeps both receipts, its row says ``late``, a metric counts it."""
    handler, engine, _ = _handler(tmp_path, delivery="pull")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="b1", sender="main-a", recipient="worker-b",
                        trace_id="t", sent_ms=1, deadline_ms=2)  # fmt: skip
        deadlines.settle(s, FORWARD, "b1", deadlines.FAILED, "INJECT_TIMEOUT")
    receipt = Envelope.new(
        kind=Kind.INJECTED, sender="B._gateway", to="main-a", ttl_s=60,
        body=injected_body("b1", "worker-b"),
    )  # fmt: skip
    record = Record(
        topic="inbox.A", partition=0, offset=1, key=b"main-a", value=b"", headers=(),
        timestamp_ms=0,
    )  # fmt: skip
    tx = Staged()
    with caplog.at_level(logging.WARNING):
        handler._to_pull(receipt, record, tx, "B")
    with sessions.begin() as s:
        tx.flush(s)
    tx.run_effects(committed=True, on_error=_raise)
    with sessions() as s:
        assert deadlines.state_of(s, FORWARD, "b1") == deadlines.LATE
        held = [r.msg_id for r in s.execute(select(held_table.c.msg_id))]
    assert held == [receipt.msg_id], "the INJECTED is held for the sender: it learns the truth"
    assert "LATE INJECTED" in caplog.text and "b1" in caplog.text
    assert handler.metrics.late_injected._value.get() == 1
    engine.dispose()


def test_an_uncertain_injected_after_the_senders_failed_is_recorded_uncertain_not_late(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The inject journal's restart report (``docs/gateway.md``): an INJECTED with stage
    ``uncertain`` that comes after the INJECT_TIMEOUT marks the row ``uncertain`` (the FAILED may
    have been wrong), is counted, and is held for the sender; it is not ``late``."""
    handler, engine, _ = _handler(tmp_path, delivery="pull")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="b1", sender="main-a", recipient="worker-b",
                        trace_id="t", sent_ms=1, deadline_ms=2)  # fmt: skip
        deadlines.settle(s, FORWARD, "b1", deadlines.FAILED, "INJECT_TIMEOUT")
    receipt = Envelope.new(
        kind=Kind.INJECTED, sender="B._gateway", to="main-a", ttl_s=60,
        body=injected_body("b1", "worker-b", stage="uncertain"),
    )  # fmt: skip
    record = Record(
        topic="inbox.A", partition=0, offset=1, key=b"main-a", value=b"", headers=(),
        timestamp_ms=0,
    )  # fmt: skip
    tx = Staged()
    with caplog.at_level(logging.WARNING):
        handler._to_pull(receipt, record, tx, "B")
    with sessions.begin() as s:
        tx.flush(s)
    tx.run_effects(committed=True, on_error=_raise)
    with sessions() as s:
        assert deadlines.state_of(s, FORWARD, "b1") == deadlines.UNCERTAIN
        held = [r.msg_id for r in s.execute(select(held_table.c.msg_id))]
    assert held == [receipt.msg_id]
    assert "UNCERTAIN INJECT" in caplog.text and "LATE INJECTED" not in caplog.text
    assert handler.metrics.uncertain_injected.labels("failed")._value.get() == 1
    assert handler.metrics.late_injected._value.get() == 0
    engine.dispose()
