"""``Record.from_message`` sets the slots directly (the lean batch): the result must be the
same frozen value the dataclass constructor builds."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.record import Record
from pipeline.testing import FakeMessage


def test_from_message_is_the_constructed_record_and_stays_frozen() -> None:
    msg = FakeMessage("t", 3, 7, b"k", b"v", [("msgId", b"m1"), ("empty", None)], 42)  # type: ignore[list-item]
    rec = Record.from_message(msg)
    assert rec == Record(
        topic="t",
        partition=3,
        offset=7,
        key=b"k",
        value=b"v",
        headers=(("msgId", b"m1"), ("empty", b"")),
        timestamp_ms=42,
    )
    assert hash(rec) == hash(dataclasses.replace(rec))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.offset = 8  # type: ignore[misc]


def test_from_message_without_headers_key_or_value() -> None:
    rec = Record.from_message(FakeMessage("t", 0, 0, None, None, None))
    assert (rec.key, rec.value, rec.headers) == (None, None, ())
