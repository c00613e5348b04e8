"""What an agent sees: one rendering for CLI, MCP and injectors (issue 15)."""

from __future__ import annotations

from pipeline.envelope import Envelope, Kind
from pipeline.gateway import render
from pipeline.gateway.held import HeldMessage
from pipeline.gateway.receipts import failed_body, injected_body


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
