"""What an agent sees: one rendering for CLI, MCP and injectors."""

from __future__ import annotations

from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import failed_body, injected_body
from pipeline.gateway import render
from pipeline.host.held import HeldMessage


def _held(kind: str, body: bytes, turn: str | None = None) -> HeldMessage:
    return HeldMessage(
        id=1, recipient="main-a", msg_id="r1", kind=kind, sender="B._gateway", trace_id="t",
        turn_id=turn, body=body, ts_ms=1, expires_at_ms=2, held_at_ms=1,
    )  # fmt: skip


def test_injected_receipt_is_decoded_into_fields_and_a_sentence() -> None:
    d = render.held_dict(_held("INJECTED", injected_body("m-42", "worker-b")))
    assert d["about"] == "m-42" and d["recipient"] == "worker-b"
    assert d["body"] is None, "raw Avro bytes never reach a reader"
    assert "m-42" in d["text"] and "worker-b" in d["text"] and "injected" in d["text"]


def test_failed_receipt_carries_reason_and_stage() -> None:
    body = failed_body("m-7", "worker-b", reason="INJECT_TIMEOUT", error="slow", stage="timeout")
    d = render.held_dict(_held("FAILED", body))
    assert (d["about"], d["reason"], d["stage"]) == ("m-7", "INJECT_TIMEOUT", "timeout")
    assert "INJECT_TIMEOUT" in d["text"] and "m-7" in d["text"]


def test_expired_ask_notice_says_the_turn_ended() -> None:
    body = failed_body("ask-1", "main-a", reason="EXPIRED", error="no answer", stage="expiry")
    d = render.held_dict(_held("FAILED", body, turn="t-9"))
    assert d["reason"] == "EXPIRED" and d["turnId"] == "t-9"
    assert "expired" in d["text"] and "t-9" in d["text"]


def test_too_late_and_abandoned_name_the_turn() -> None:
    late = render.held_dict(_held("TOO_LATE", b"", turn="t-1"))
    assert late["reason"] == "TOO_LATE" and late["turnId"] == "t-1" and "t-1" in late["text"]
    gone = render.held_dict(_held("ABANDONED", b"", turn="t-2"))
    assert gone["reason"] == "ABANDONED" and "TOO_LATE" in gone["text"]


def test_unreadable_receipt_is_reported_not_raised() -> None:
    d = render.held_dict(_held("INJECTED", b"\x00garbage"))
    assert d["reason"] == "SCHEMA_INVALID" and "unreadable" in d["text"]


def test_content_kinds_keep_their_body() -> None:
    d = render.held_dict(_held("REPLY", "done ✓".encode()))
    assert d["body"] == "done ✓" and d["text"] == "done ✓"
    assert render.held_line(_held("REPLY", b"done")).endswith(": done")


def test_injector_gets_a_sentence_for_no_waiter_and_the_body_for_a_brief() -> None:
    nw = Envelope.new(kind=Kind.NO_WAITER, sender="main-a", to="w", ttl_s=60, turn_id="t-3")
    typed = render.for_injector(nw, "w").decode()
    assert typed.startswith("[fleet] NO_WAITER") and "main-a" in typed and "t-3" in typed
    brief = Envelope.new(kind=Kind.SEND, sender="main-a", to="w", body=b"do it", ttl_s=60)
    assert render.for_injector(brief, "w") == b"do it"


class _Capture:
    """The publisher ``stage_answer`` stages through: keeps the answer envelope."""

    gateway_id = "B._gateway"

    def __init__(self) -> None:
        self.staged: list[Envelope] = []

    def stage(self, _session: object, env: Envelope, *, to_host: str) -> None:
        self.staged.append(env)


def _answer(stage: str) -> HeldMessage:
    from typing import Any, cast

    from pipeline.control.answers import stage_answer

    cap = _Capture()
    stage_answer(cast(Any, cap), cast(Any, None), request_msg_id="x-1", requester="main-a",
                 requester_host="A", gid="w-1", trace_id="t", reason=None, error="",
                 stage=stage)  # fmt: skip
    (env,) = cap.staged
    return _held(env.kind.value, env.body)


def test_a_stop_outcome_reads_worker_stopped_not_injected() -> None:
    """R-LIFE-3: a successful STOP's answer (an INJECTED about the STOP, staged by the control
    plane's one answer path) says what happened: the worker stopped -- in text, --json and MCP
    (all :func:`render.held_dict` / :func:`render.held_line`) and in a pane."""
    m = _answer("stop")
    d = render.held_dict(m)
    assert d["text"] == "worker w-1 stopped (stop x-1)."
    assert (d["about"], d["recipient"], d["stage"]) == ("x-1", "w-1", "stop")
    assert "injected" not in render.held_line(m)
    env = Envelope.new(kind=Kind.INJECTED, sender="B._gateway", to="main-a", body=m.body, ttl_s=9)
    assert render.for_injector(env, "main-a") == b"[fleet] worker w-1 stopped (stop x-1)."
    assert render.held_dict(_answer("spawn"))["text"] == "worker w-1 spawned (spawn x-1)."


def test_an_old_injected_receipt_without_a_stage_still_reads_as_an_injection() -> None:
    from pipeline import schemas

    v1 = schemas.encode("injected", {"msg_id": "m-1", "recipient": "w", "injected_at_ms": 1},
                        version=1)  # fmt: skip
    d = render.held_dict(_held("INJECTED", v1))
    assert "stage" not in d and "injected into w" in d["text"]
