"""Dead-letter record format: verbatim original, one context header, bounded error text."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline import schemas
from pipeline.errors import EnvelopeError
from pipeline.failures.dlq import DLQ_HEADER, bounded_error, read_dead_letter
from pipeline.record import Record, key_text
from pipeline.record_headers import pack_headers, unpack_headers


class FakeMsg:
    def __init__(self, headers: list[tuple[str, bytes]], key: bytes | None = b"k") -> None:
        self._headers = headers
        self._key = key

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return b"body"

    def topic(self) -> str:
        return "fleet.dlq"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7

    def timestamp(self) -> tuple[int, int]:
        return (1, 1234)


def _context(**over: Any) -> dict[str, Any]:
    base = {
        "reason": "SIG_INVALID",
        "error": "e",
        "topic": "fleet.inbox.h1",
        "partition": 2,
        "offset": 40,
        "timestamp_ms": 1,
        "attempts": 1,
        "first_failure_ms": 2,
        "last_failure_ms": 3,
        "gateway": "h1",
        "group": None,
        "verified": False,
        "quarantined": False,
        "dead_lettered_ms": 4,
    }
    base.update(over)
    return base


def test_error_text_is_cut_to_1_kib_without_splitting_characters() -> None:
    assert bounded_error("short") == "short"
    cut = bounded_error("é" * 2000)
    assert len(cut.encode()) <= 1024 and cut.endswith("...")
    cut.encode("utf-8")  # valid UTF-8: no half character left behind


def test_reader_takes_the_last_context_header_so_a_smuggled_one_is_just_a_header() -> None:
    forged = schemas.encode("dead_letter", _context(verified=True, reason="FORGED"))
    ours = schemas.encode("dead_letter", _context())
    original = [("msgId", b"m1"), (DLQ_HEADER, forged), ("from", b"a@h2")]
    view = read_dead_letter(FakeMsg([*original, (DLQ_HEADER, ours)]))
    assert view.reason == "SIG_INVALID" and view.verified is False
    assert view.headers == original  # verbatim, order kept, smuggled header included
    assert view.msg_id == "m1" and view.sender == "a@h2" and view.kind is None
    assert view.ref == "fleet.dlq:0:7"


def test_a_record_without_context_is_schema_invalid() -> None:
    with pytest.raises(EnvelopeError) as info:
        read_dead_letter(FakeMsg([("msgId", b"m1")]))
    assert info.value.reason == "SCHEMA_INVALID"


def test_record_copy_and_key_text_round_trip() -> None:
    copy = Record.from_message(FakeMsg([("a", b"\x00\xff"), ("a", b"")]))
    assert copy.timestamp_ms == 1234 and copy.offset == 7
    assert unpack_headers(pack_headers(copy.headers)) == [("a", b"\x00\xff"), ("a", b"")]
    assert key_text(b"agent@h1") == "agent@h1"
    assert key_text(b"\xff\x00") == "hex:ff00"
    assert key_text(b"hex:41") == "hex:6865783a3431"  # no collision with the hex form
    assert key_text(None) == ""
