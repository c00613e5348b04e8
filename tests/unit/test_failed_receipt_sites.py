"""Every place that tells a sender ``FAILED`` builds the same envelope it always did.

The cross-source dedupe (R-ACK-5, R-DLQ-4: exactly one FAILED per send) rests on every source using
msgId ``failed-<original msgId>``: the deadline tracker, the DLQ reporter, the relay's terminal
sink, a failed inject and the control plane's answer. Each test below pins one source's envelope
field by field (kind, msgId, from, to, TTL, traceId, turnId and the Avro body), so moving the
construction into one builder cannot change a byte a receiver sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pipeline import schemas
from pipeline.control.answers import stage_answer
from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import (
    expired_msg_id,
    failed_msg_id,
    failed_receipt,
    injected_msg_id,
)
from pipeline.failures.dlq import DeadLetterView
from pipeline.gateway import injection, maintenance
from pipeline.gateway.failed_for_dead_letter import EnvelopeFailedSink
from pipeline.gateway.failed_for_refused_row import RelayFailedSink
from pipeline.host import deadlines
from pipeline.host.conversations import Conversations
from pipeline.host.tracking import FORWARD
from pipeline.outbox.terminal import FailedRow
from pipeline.store import make_engine, session_factory


@dataclass
class _Publisher:
    """Stands in for :class:`pipeline.host.outbound.Publisher`: records what would be staged."""

    host: str = "A"
    staged: list[tuple[Envelope, str]] = field(default_factory=list)

    @property
    def gateway_id(self) -> str:
        return f"{self.host}._gateway"

    def stage(self, session: Any, envelope: Envelope, *, to_host: str) -> int:
        self.staged.append((envelope, to_host))
        return len(self.staged)


def _assert_failed(
    env: Envelope,
    *,
    msg_id: str,
    sender: str,
    to: str,
    ttl_s: float,
    trace_id: str | None,
    turn_id: str | None = None,
    body: dict[str, str],
) -> None:
    assert env.kind is Kind.FAILED
    assert (env.msg_id, env.sender, env.to, env.turn_id, env.spawn_id) == (
        msg_id,
        sender,
        to,
        turn_id,
        None,
    )
    assert env.expires_at_ms - env.ts_ms == round(ttl_s * 1000)
    if trace_id is None:  # minted: a fresh uuid4 hex
        assert len(env.trace_id) == 32 and int(env.trace_id, 16) >= 0
    else:
        assert env.trace_id == trace_id
    record = schemas.decode("failed", env.body)
    assert record.pop("failed_at_ms") > 0
    assert record == body


def _body(msg_id: str, recipient: str, reason: str, error: str, stage: str) -> dict[str, str]:
    return {"msg_id": msg_id, "recipient": recipient, "reason": reason, "error": error,
            "stage": stage}  # fmt: skip


def test_the_one_builder_sets_every_field_of_a_failed() -> None:
    env = failed_receipt(about="m-1", recipient="w-1", sender="A._gateway", to="main-a",
                         reason="INJECT_TIMEOUT", error="x" * 2000, stage="timeout", ttl_s=30.5,
                         trace_id="t-1")  # fmt: skip
    _assert_failed(env, msg_id="failed-m-1", sender="A._gateway", to="main-a", ttl_s=30.5,
                   trace_id="t-1", body=_body("m-1", "w-1", "INJECT_TIMEOUT", "x" * 1024,
                                              "timeout"))  # fmt: skip
    notice = failed_receipt(about="ask-1", recipient="w-1", sender="A._gateway", to="main-a",
                            reason="EXPIRED", error="", stage="expiry", ttl_s=1, trace_id=None,
                            msg_id=expired_msg_id("ask-1"), turn_id="turn-1")  # fmt: skip
    assert (notice.msg_id, notice.turn_id) == ("expired-ask-1", "turn-1")


def test_answer_ids_are_derived_from_the_message_they_are_about() -> None:
    """One spelling: the dedupe across FAILED sources depends on it (R-ACK-5, R-DLQ-4)."""
    assert failed_msg_id("m-1") == "failed-m-1"
    assert injected_msg_id("sp-1") == "injected-sp-1"
    assert expired_msg_id("ask-1") == "expired-ask-1"


def test_the_deadline_tracker_holds_failed_about_the_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[Envelope] = []
    monkeypatch.setattr(deadlines, "hold_notice", lambda s, env, now: held.append(env) or True)
    sessions = session_factory(make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}"))
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="b1", sender="main-a", recipient="w-1",
                        deadline_ms=100, trace_id="t-1", sent_ms=1)  # fmt: skip
    duty = deadlines.Deadlines(
        sessions=sessions, gateway_id="A._gateway", kinds=(FORWARD,), ttl_s=600.0
    )
    assert duty.tick(101) == 1
    _assert_failed(
        held[0],
        msg_id="failed-b1",
        sender="A._gateway",
        to="main-a",
        ttl_s=600.0,
        trace_id="t-1",
        body={
            "msg_id": "b1",
            "recipient": "w-1",
            "reason": FORWARD.reason,
            "error": FORWARD.describe(_Row(msg_id="b1", recipient="w-1")),
            "stage": FORWARD.stage,
        },
    )


@dataclass
class _Row:
    msg_id: str
    recipient: str
    deadline_ms: int = 100
    sent_ms: int = 1


def test_the_turn_expiry_notice_keeps_its_own_id_and_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The expiry notice is a FAILED about the ASK, but its own message (``expired-<ask>``)."""

    @contextmanager
    def session() -> Iterator[None]:
        yield None

    class _Sessions:
        def __call__(self) -> Any:
            return session()

        def begin(self) -> Any:
            return session()

    row = _TurnRow(turn_id="turn-1", ask_msg_id="ask-1", asker="main-a", asked="w-1")
    monkeypatch.setattr(
        Conversations, "expired_turns", staticmethod(lambda s, now, limit=500: [row])
    )
    monkeypatch.setattr(maintenance.due, "turn_expired", lambda s, now: True)  # the look-first
    monkeypatch.setattr(Conversations, "close_turn", staticmethod(lambda s, turn_id, state: True))
    held: list[Envelope] = []
    monkeypatch.setattr(maintenance, "hold_notice", lambda s, env, now: held.append(env) or True)
    duty = maintenance.Maintenance.__new__(maintenance.Maintenance)
    duty.reads = duty.sessions = _Sessions()  # type: ignore[assignment]
    duty.publisher = _Publisher()  # type: ignore[assignment]
    duty.entities = duty.injections = None
    duty.max_ttl_ms = 900_000
    duty.metrics = _Metrics()  # type: ignore[assignment]
    duty.expire_turns()
    _assert_failed(
        held[0],
        msg_id="expired-ask-1",
        sender="A._gateway",
        to="main-a",
        ttl_s=900.0,
        trace_id=None,
        turn_id="turn-1",
        body={
            "msg_id": "ask-1",
            "recipient": "w-1",
            "reason": "EXPIRED",
            "error": "no answer from w-1 before the ASK expired",
            "stage": "expiry",
        },
    )


@dataclass
class _TurnRow:
    turn_id: str
    ask_msg_id: str
    asker: str
    asked: str


class _Metrics:
    class _Counter:
        def labels(self, *_: str) -> _Metrics._Counter:
            return self

        def inc(self, n: float = 1) -> None:
            pass

    expiries = _Counter()


def test_the_relay_terminal_sink_tells_the_local_sender() -> None:
    publisher = _Publisher()
    sink = RelayFailedSink(publisher=publisher, ttl_s=1200.0)  # type: ignore[arg-type]
    headers = [
        ("kind", b"SEND"),
        ("msgId", b"m-9"),
        ("from", b"main-a"),
        ("to", b"w-2"),
        ("traceId", b"t-9"),
    ]
    sink.row_failed(
        None,  # type: ignore[arg-type]
        FailedRow(
            id=1,
            tenant="",
            branch_key="b",
            lsn=1,
            topic="t",
            key=None,
            headers=headers,
            reason="MSG_TOO_LARGE",
            error="too big",
        ),
    )
    ((env, host),) = publisher.staged
    assert host == "A"
    _assert_failed(
        env,
        msg_id="failed-m-9",
        sender="A._gateway",
        to="main-a",
        ttl_s=1200.0,
        trace_id="t-9",
        body=_body("m-9", "w-2", "MSG_TOO_LARGE", "too big", "relay"),
    )


def test_the_dlq_reporter_sink_tells_the_briefs_signer() -> None:
    @dataclass
    class _Trusted:
        host: str

    class _Trust:
        def lookup(self, key_id: str) -> _Trusted | None:
            return _Trusted("B") if key_id == "k-B" else None

    publisher = _Publisher()
    sink = EnvelopeFailedSink(publisher=publisher, trust=_Trust(), ttl_s=1800.0)  # type: ignore[arg-type]
    view = DeadLetterView(
        dlq_topic="fleet.dlq", dlq_partition=0, dlq_offset=7, key=b"w-3",
        headers=[("kind", b"SEND"), ("msgId", b"m-3"), ("from", b"main-b"), ("to", b"w-3"),
                 ("traceId", b"t-3"), ("keyId", b"k-B")],
        value=b"", context={"reason": "UNKNOWN_RECIPIENT"},
    )  # fmt: skip
    assert sink.stage_failed(
        None,  # type: ignore[arg-type]
        original_msg_id="m-3",
        sender="main-b",
        reason="UNKNOWN_RECIPIENT",
        error="no such gid",
        dead_letter=view,
    )
    ((env, host),) = publisher.staged
    assert host == "B"
    _assert_failed(
        env,
        msg_id="failed-m-3",
        sender="A._gateway",
        to="main-b",
        ttl_s=1800.0,
        trace_id="t-3",
        body=_body("m-3", "w-3", "UNKNOWN_RECIPIENT", "no such gid", "dlq"),
    )


def test_the_control_answer_is_failed_or_injected_about_the_request() -> None:
    publisher = _Publisher()
    common = {"requester": "main-a", "requester_host": "C", "gid": "w-4", "trace_id": "t-4"}
    stage_answer(publisher, None, request_msg_id="sp-1", reason="SPAWN_REFUSED",  # type: ignore[arg-type]
                 error="no room", stage="spawn", **common)  # fmt: skip
    stage_answer(publisher, None, request_msg_id="st-1", reason=None,  # type: ignore[arg-type]
                 error="", stage="stop", **common)  # fmt: skip
    (failed, host), (injected, host2) = publisher.staged
    assert host == host2 == "C"
    _assert_failed(
        failed,
        msg_id="failed-sp-1",
        sender="A._gateway",
        to="main-a",
        ttl_s=3600.0,
        trace_id="t-4",
        body=_body("sp-1", "w-4", "SPAWN_REFUSED", "no room", "spawn"),
    )
    assert (injected.kind, injected.msg_id, injected.trace_id) == (
        Kind.INJECTED,
        "injected-st-1",
        "t-4",
    )


def test_a_failed_inject_tells_the_sender_of_a_tracked_brief() -> None:
    queue = injection.InjectionQueue.__new__(injection.InjectionQueue)
    queue.publisher = _Publisher()  # type: ignore[assignment]
    brief = Envelope.new(kind=Kind.SEND, sender="main-a", to="w-5", ttl_s=60, trace_id="t-5",
                         msg_id="m-5")  # fmt: skip
    job = injection._Job(gid="w-5", envelope=brief, reply_host="D", queued_at=0.0)
    receipt = queue._failed(job, "INJECT_FAILED", "pane gone")
    assert receipt is not None and receipt.host == "D"
    _assert_failed(
        receipt.envelope,
        msg_id="failed-m-5",
        sender="A._gateway",
        to="main-a",
        ttl_s=3600.0,
        trace_id="t-5",
        body=_body("m-5", "w-5", "INJECT_FAILED", "pane gone", "inject"),
    )
    untracked = injection._Job(gid="w-5", envelope=brief, reply_host=None, queued_at=0.0)
    assert queue._failed(untracked, "INJECT_FAILED", "pane gone") is None
