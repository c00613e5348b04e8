"""The dead letter's plain-text headers (``pipeline.failures.dlq.plain_headers``): one per
context fact, UTF-8, after the Avro context, and never read back as original headers
(R-DLQ-1: the original headers stay verbatim)."""

from __future__ import annotations

import pytest

from pipeline import schemas
from pipeline.failures.dlq import DLQ_HEADER, exception_class, plain_headers, read_dead_letter
from tests.unit.test_failures_dlq_format import FakeMsg, _context


@pytest.mark.parametrize(
    ("error", "name"),
    [
        ("ValueError: no brief", "ValueError"),
        ("RETRIES_EXHAUSTED after 5 attempts: TimeoutError: slow", "TimeoutError"),
        ("RETRIES_EXHAUSTED after 5 attempts: store unavailable", None),
        ("SIG_INVALID: signature does not verify", None),  # a reason code, not a class
        ("sender unknown", None),
    ],
)
def test_the_exception_class_is_named_only_when_the_error_names_one(
    error: str, name: str | None
) -> None:
    assert exception_class(error) == name


def test_absent_values_are_left_out_and_the_rest_is_text() -> None:
    context = _context(group=None, error="signature does not verify")
    got = dict(plain_headers(context))
    assert "fleet.dlq.group" not in got and "fleet.dlq.exception.class" not in got
    assert got["fleet.dlq.reason"] == context["reason"].encode()
    assert got["fleet.dlq.original.offset"] == str(context["offset"]).encode()
    assert all(k.startswith(DLQ_HEADER + ".") for k in got)


def test_the_reader_keeps_them_apart_from_the_original_headers() -> None:
    context = _context()
    original = [("msgId", b"m1"), ("fleet.dlq.reason", b"SMUGGLED")]
    raw = [*original, (DLQ_HEADER, schemas.encode("dead_letter", context)),
           *plain_headers(context)]  # fmt: skip
    view = read_dead_letter(FakeMsg(raw))
    assert view.headers == original
    assert view.reason == context["reason"]
