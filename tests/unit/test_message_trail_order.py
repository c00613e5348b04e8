"""`fleet trace` lists a message's marks in time order, and marks of one millisecond in the order
of a message's life: a batch claims a record (``received``) and holds it in one transaction, so on
a fast path both carry the same millisecond."""

from __future__ import annotations

from pipeline.observability.message_trail import TrailEvent, order_key


def _e(at_ms: int, what: str) -> TrailEvent:
    return TrailEvent(at_ms=at_ms, where="A", what=what, detail="")


def test_marks_of_one_millisecond_follow_the_stages_of_a_message() -> None:
    marks = [_e(7, "drained"), _e(5, "held"), _e(5, "received"), _e(3, "relay"), _e(3, "outbox")]
    assert [e.what for e in sorted(marks, key=order_key)] == [
        "outbox", "relay", "received", "held", "drained",
    ]  # fmt: skip


def test_time_comes_first_and_an_unknown_mark_goes_last_within_its_millisecond() -> None:
    marks = [_e(9, "received"), _e(4, "held"), _e(4, "something-new"), _e(4, "inject")]
    assert [(e.at_ms, e.what) for e in sorted(marks, key=order_key)] == [
        (4, "held"), (4, "inject"), (4, "something-new"), (9, "received"),
    ]  # fmt: skip
