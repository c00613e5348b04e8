"""Batch verification across threads (issue 17): same outcomes, same order as one by one."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.envelope import BatchVerifier, Kind
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError
from tests.envelope_kit import Fleet


def _items(f: Fleet) -> tuple[list[Any], list[str | None]]:
    """Good records interleaved with every kind of refusal, with the reason each must get."""
    items: list[Any] = []
    reasons: list[str | None] = []
    for i in range(60):
        rec = f.record(f.envelope(msg_id=f"good-{i}", kind=Kind.SEND))
        expected: str | None = None
        if i % 5 == 1:
            rec["value"] = rec["value"] + b"!"
            expected = r.SIG_INVALID
        elif i % 5 == 3:
            rec = f.record(f.envelope(msg_id=f"c-{i}", sender="m-c"), signer="a")
            expected = r.SIGNER_MISMATCH
        elif i % 7 == 0:
            rec["headers"] = None
            expected = r.NOT_SIGNED
        items.append((rec["topic"], rec["key"], rec["headers"], rec["value"]))
        reasons.append(expected)
    return items, reasons


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_outcomes_line_up_with_the_input_in_order(threads: int) -> None:
    f = Fleet()
    items, reasons = _items(f)
    batch = BatchVerifier(f.verifier("b"), threads=threads, min_batch=4)
    try:
        outcomes = batch.verify_all(items)
    finally:
        batch.close()
    assert len(outcomes) == len(items)
    for i, (outcome, expected) in enumerate(zip(outcomes, reasons, strict=True)):
        if expected is None:
            assert not isinstance(outcome, Exception), (i, outcome)
            assert outcome.envelope.msg_id == f"good-{i}"
        else:
            assert isinstance(outcome, EnvelopeError), (i, outcome)
            assert outcome.reason == expected, i


def test_a_small_batch_is_verified_inline_and_a_bad_thread_count_is_refused() -> None:
    f = Fleet()
    items, _ = _items(f)
    batch = BatchVerifier(f.verifier("b"), threads=2, min_batch=16)
    try:
        assert len(batch.verify_all(items[:3])) == 3
    finally:
        batch.close()
    with pytest.raises(ValueError, match="threads"):
        BatchVerifier(f.verifier("b"), threads=0)
