"""`fleet trace` lists a message's marks in time order, and marks of one millisecond in the order
of a message's life: a batch claims a record (``received``) and holds it in one transaction, so on
a fast path both carry the same millisecond."""

from __future__ import annotations

from pathlib import Path

from pipeline.host import deadlines
from pipeline.host.tracking import FORWARD
from pipeline.observability.message_trail import TrailEvent, message_trail, order_key
from pipeline.store import make_engine, session_factory


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


def test_a_tracked_send_names_its_host_and_a_store_without_the_column_is_read_as_it_is(
    tmp_path: Path,
) -> None:
    """Revision 0017 keeps the host a tracked brief went to; ``fleet trace`` says it. A peer's
    store not yet upgraded (a rolling upgrade) has no such column and is read all the same."""
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    row = {"sender": "main-a", "recipient": "worker-b", "trace_id": "t1", "sent_ms": 1_000,
           "deadline_ms": 61_000}  # fmt: skip
    with session_factory(engine).begin() as s:
        deadlines.track(s, FORWARD, msg_id="m1", host="B", **row)
    [tracked] = [e for e in message_trail(engine, "m1", where="A") if e.what == "tracked"]
    assert tracked.detail.startswith("inject: main-a -> worker-b on B, waits")
    with engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE fleet_forward_sends DROP COLUMN host")
    engine.dispose()
    [tracked] = [e for e in message_trail(engine, "m1", where="A") if e.what == "tracked"]
    assert tracked.detail.startswith("inject: main-a -> worker-b, waits")
    assert tracked.detail.endswith("now pending")
    engine.dispose()
