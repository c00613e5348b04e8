"""Store contract suite for hold-and-nudge, drain-time expiry and ASK expiry.

Same tests on SQLite and PostgreSQL; the code under test is what the gateway runs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import insert

from pipeline.envelope import Signer
from pipeline.gateway import render
from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
from pipeline.gateway.maintenance import Maintenance
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.gateway.nudge import Nudger
from pipeline.host.conversations import EXPIRED, Conversations, turns_table
from pipeline.host.held import HeldStore, held_table
from pipeline.host.outbound import Publisher
from pipeline.kafka.topics import TopicNames

pytestmark = pytest.mark.postgres


def _held(recipient: str, msg_id: str, *, expires_in_ms: int = 60_000) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {
        "recipient": recipient, "msg_id": msg_id, "kind": "REPLY", "sender": "w", "trace_id": "t",
        "turn_id": None, "body": msg_id.encode(), "headers": None, "topic": "x", "ts_ms": now,
        "expires_at_ms": now + expires_in_ms, "held_at_ms": now,
    }  # fmt: skip


class Pane:
    def __init__(self) -> None:
        self.typed: list[bytes] = []

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        self.typed.append(body)


def test_a_drain_never_returns_a_message_past_its_expiry(sessions: Any) -> None:
    """R-EXP-1: expiresAt is enforced at delivery -- before the sweeper runs, too."""
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", "old", expires_in_ms=-1), _held("m", "new")])
    store = HeldStore(sessions, reads=sessions)
    assert [m.msg_id for m in store.poll("m")] == ["new"]
    assert store.poll("m") == []
    with sessions() as s:
        assert len(store.expired(s, int(time.time() * 1000))) == 1, "left for the sweeper"


def test_nudges_follow_the_schedule_never_while_a_pull_is_open_and_reset_on_drain(
    sessions: Any,
) -> None:
    """R-HOLD-2 hold + nudge: backoff to a cap, silent during an open pull, reset on drain."""
    clock = [0.0]
    pane = Pane()
    registry = CollectorRegistry()
    conversations = Conversations(sessions)
    nudger = Nudger(
        targets={"main-a": pane}, reads=sessions, conversations=conversations,
        metrics=GatewayMetrics(registry), gateway_id="A._gateway", initial_s=1.0, max_s=4.0,
        clock=lambda: clock[0],
    )  # fmt: skip
    assert nudger.tick() == 0 and pane.typed == [], "nothing held: no nudge"
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("main-a", "1"), _held("main-a", "2")])
    sent_at = []
    for step in range(40):  # 0.0 .. 9.75 s in quarter seconds
        clock[0] = step * 0.25
        if nudger.tick():
            sent_at.append(clock[0])
    assert sent_at == [0.0, 1.0, 3.0, 7.0], "first at once, then 1, 2, 4 (the cap), ..."
    assert pane.typed[0].decode() == render.nudge_text("main-a", 2, 0.0)
    sent = registry.get_sample_value("fleet_gateway_nudges_total", {"outcome": "sent"})
    assert sent == 4
    with conversations.open_pull("main-a", 30):
        clock[0] = 100.0
        assert nudger.tick() == 0, "an open pull takes the messages itself"
    assert nudger.tick() == 1, "the pull closed without draining: due again"
    HeldStore(sessions).poll("main-a")
    assert nudger.tick() == 0
    assert nudger.schedules["main-a"].sent == 0, "a drain resets the schedule"
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("main-a", "3")])
    clock[0] = 100.5
    assert nudger.tick() == 1, "a fresh arrival is nudged at once"


def test_an_expired_ask_ends_the_turn_with_a_notice_the_asker_can_poll(sessions: Any) -> None:
    """R-CONV-3: an ASK nobody answered must not vanish without a word to the asker."""
    now = int(time.time() * 1000)
    with sessions.begin() as s:
        Conversations.open_turn(
            s, turn_id="t-1", asker="main-a", asked="worker-b", msg_id="ask-1",
            expires_at_ms=now - 1,
        )  # fmt: skip
    topics = TopicNames(prefix="t.")
    maint = Maintenance(
        sessions=sessions, held=HeldStore(sessions), conversations=Conversations(sessions),
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="A", group="g"),
        publisher=Publisher(host="A", signer=Signer.generate("A"), topics=topics),
        metrics=GatewayMetrics(CollectorRegistry()), max_ttl_s=3600,
    )  # fmt: skip
    maint.expire_turns()
    maint.expire_turns()  # idempotent: the turn is closed once, one notice
    with sessions() as s:
        state = s.execute(turns_table.select().where(turns_table.c.turn_id == "t-1")).one().state
    assert state == EXPIRED
    got = HeldStore(sessions).poll("main-a")
    assert len(got) == 1 and got[0].kind == "FAILED" and got[0].turn_id == "t-1"
    d = render.held_dict(got[0])
    assert (d["about"], d["reason"], d["stage"]) == ("ask-1", "EXPIRED", "expiry")


class _Injections:
    """What the gateway's inject queue is handed (``InjectionQueue.submit``)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, Any]] = []

    def submit(self, gid: str, envelope: Any, *, reply_host: str | None) -> None:
        self.submitted.append((gid, envelope))


def test_a_deadline_failed_is_injected_into_a_worker_sender_and_held_for_a_main(
    sessions: Any,
) -> None:
    """R-ACK-5: no INJECTED in time is one FAILED *at the sender*. A worker takes delivery by
    inject and never drains held rows: a FAILED held for it was never heard. Its FAILED is
    injected (after the commit that settles its brief); a main's is held, as before."""
    from pipeline.gateway.entities import LocalEntities
    from pipeline.host.deadlines import track
    from pipeline.host.tracking import FORWARD, forward_table
    from pipeline.presence.model import Delivery, Role

    now = int(time.time() * 1000)
    with sessions.begin() as s:
        for msg_id, sender in (("b-w", "worker-a"), ("b-m", "main-a")):
            track(s, FORWARD, msg_id=msg_id, sender=sender, recipient="worker-b",
                  trace_id="t", sent_ms=now - 60_000, deadline_ms=now - 1, host="B")  # fmt: skip
    entities = LocalEntities()
    entities.register(gid="worker-a", role=Role.WORKER, delivery=Delivery.INJECT, injector=Pane())  # type: ignore[arg-type]
    entities.register(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    injections = _Injections()
    topics = TopicNames(prefix="t.")
    registry = CollectorRegistry()
    maint = Maintenance(
        sessions=sessions, held=HeldStore(sessions), conversations=Conversations(sessions),
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="A", group="g"),
        publisher=Publisher(host="A", signer=Signer.generate("A"), topics=topics),
        metrics=GatewayMetrics(registry), max_ttl_s=3600, entities=entities,
        injections=injections,  # type: ignore[arg-type]
    )  # fmt: skip
    assert maint.deadlines() == 2
    assert maint.deadlines() == 0, "one FAILED per brief"
    assert [(gid, e.kind.value, e.to) for gid, e in injections.submitted] == [
        ("worker-a", "FAILED", "worker-a")
    ]
    assert HeldStore(sessions).poll("worker-a") == [], "held for a worker: never heard"
    held = HeldStore(sessions).poll("main-a")
    assert [render.held_dict(h)["reason"] for h in held] == ["INJECT_TIMEOUT"]
    with sessions() as s:
        states = dict(s.execute(forward_table.select().with_only_columns(
            forward_table.c.msg_id, forward_table.c.state)).all())  # fmt: skip
    assert states == {"b-w": "failed", "b-m": "failed"}
    assert registry.get_sample_value("fleet_gateway_injected_timeouts_total") == 2
