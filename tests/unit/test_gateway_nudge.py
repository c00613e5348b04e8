"""Hold and nudge: the backoff schedule on an injectable clock (R-HOLD-2)."""

from __future__ import annotations

from pipeline.gateway.nudge import NudgeSchedule


def test_first_nudge_is_due_at_once_then_backs_off_exponentially_to_the_cap() -> None:
    s = NudgeSchedule(initial_s=2.0, max_s=10.0)
    now, sent_at = 100.0, []
    while now < 160.0:
        if s.due(now):
            sent_at.append(now)
            s.record(now)
        now += 0.5
    assert [t - 100.0 for t in sent_at] == [0.0, 2.0, 6.0, 14.0, 24.0, 34.0, 44.0, 54.0]


def test_reset_starts_the_schedule_afresh() -> None:
    s = NudgeSchedule(initial_s=1.0, max_s=60.0)
    for t in (0.0, 1.0, 3.0):
        assert s.due(t)
        s.record(t)
    assert not s.due(6.9)
    s.reset()
    assert s.due(7.0) and s.record(7.0) == 1.0
