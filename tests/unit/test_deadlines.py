"""The one deadline tracker serves forward sends and SPAWNs alike (R-ACK-5, R-SPAWN-3: no
answer by the deadline = exactly one FAILED at the sender, whatever was sent)."""

from __future__ import annotations

from pathlib import Path

from pipeline.control import SPAWN, STOP
from pipeline.envelope.receipts import read_receipt
from pipeline.host import deadlines
from pipeline.host.deadlines import Deadlines
from pipeline.host.held import HeldStore
from pipeline.host.tracking import FORWARD
from pipeline.store import make_engine, session_factory


def test_one_tick_fails_each_overdue_send_of_every_kind_once(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    sessions = session_factory(engine)
    common = {"trace_id": "t", "sent_ms": 1}
    with sessions.begin() as s:
        deadlines.track(s, FORWARD, msg_id="b1", sender="main-a", recipient="w-1",
                        deadline_ms=100, **common)  # fmt: skip
        deadlines.track(s, FORWARD, msg_id="b2", sender="main-a", recipient="w-1",
                        deadline_ms=100, **common)  # fmt: skip
        deadlines.track(s, SPAWN, msg_id="s1", spawn_id="w-2", requester="main-a", host="B",
                        profile="shell", deadline_ms=100, **common)  # fmt: skip
        deadlines.track(s, SPAWN, msg_id="s2", spawn_id="w-3", requester="main-a", host="B",
                        profile="shell", deadline_ms=10_000, **common)  # fmt: skip
        deadlines.settle_answer(s, (FORWARD, SPAWN), "b2", injected=True, reason="")
    timeouts: list[str] = []
    duty = Deadlines(
        sessions=sessions,
        gateway_id="A._gateway",
        kinds=(FORWARD, SPAWN),
        on_timeout={"inject": lambda: timeouts.append("inject")},
    )
    assert duty.tick(101) == 2
    assert duty.tick(102) == 0, "settled once: never a second FAILED"
    got = {m.msg_id: read_receipt(m.kind, m.body) for m in HeldStore(sessions).poll("main-a")}
    assert sorted(got) == ["failed-b1", "failed-s1"]
    assert (got["failed-b1"].reason, got["failed-b1"].recipient) == ("INJECT_TIMEOUT", "w-1")
    assert (got["failed-s1"].reason, got["failed-s1"].recipient) == ("SPAWN_TIMEOUT", "w-2")
    assert timeouts == ["inject"], "each kind counts in its own metric"
    with sessions() as s:
        assert deadlines.answered(s, (FORWARD, SPAWN), "b2") == "injected"
        assert deadlines.answered(s, (FORWARD, SPAWN), "s1") == deadlines.FAILED
        assert deadlines.answered(s, (FORWARD, SPAWN), "s2") == deadlines.PENDING
        assert deadlines.answered(s, (FORWARD, SPAWN), "nope") is None
    engine.dispose()


def test_a_stop_without_an_outcome_in_time_is_one_failed_stop_timeout(tmp_path: Path) -> None:
    """R-LIFE-3: STOP is tracked like SPAWN -- the target's answer settles it; none by the
    deadline is exactly one FAILED (STOP_TIMEOUT) about the worker; a late FAILED is dropped by
    the inbox (it finds the row failed), so the requester never gets a second one."""
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    sessions = session_factory(engine)
    kinds = (FORWARD, SPAWN, STOP)
    common = {"trace_id": "t", "sent_ms": 1, "requester": "main-a", "host": "B"}
    with sessions.begin() as s:
        deadlines.track(s, STOP, msg_id="x1", stop_id="stop-1", gid="w-1", deadline_ms=100,
                        **common)  # fmt: skip
        deadlines.track(s, STOP, msg_id="x2", stop_id="stop-2", gid="w-2", deadline_ms=100,
                        **common)  # fmt: skip
        deadlines.settle_answer(s, kinds, "x2", injected=True, reason="")  # answered: stopped
    duty = Deadlines(sessions=sessions, gateway_id="A._gateway", kinds=kinds)
    assert duty.tick(101) == 1
    assert duty.tick(102) == 0
    got = {m.msg_id: read_receipt(m.kind, m.body) for m in HeldStore(sessions).poll("main-a")}
    assert list(got) == ["failed-x1"]
    r = got["failed-x1"]
    assert (r.reason, r.recipient, r.stage, r.msg_id) == ("STOP_TIMEOUT", "w-1", "stop", "x1")
    assert "stop-1" in r.error and "B" in r.error
    with sessions() as s:
        assert deadlines.answered(s, kinds, "x1") == deadlines.FAILED
        assert deadlines.answered(s, kinds, "x2") == "stopped"
    engine.dispose()
