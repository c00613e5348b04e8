"""pipeline.support.waiting: the one bounded polling loop."""

from __future__ import annotations

import pytest

from pipeline.support.waiting import wait_until


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_it_returns_the_condition_s_first_truthy_value() -> None:
    t, answers = FakeTime(), iter([None, 0, [], ["row"]])
    got = wait_until(
        lambda: next(answers), timeout_s=10, what="a row", interval_s=0.5,
        sleep=t.sleep, clock=t.clock,
    )  # fmt: skip
    assert got == ["row"] and t.sleeps == [0.5, 0.5, 0.5]


def test_a_condition_that_holds_at_once_does_not_sleep() -> None:
    t = FakeTime()
    assert wait_until(lambda: 7, timeout_s=1, what="x", sleep=t.sleep, clock=t.clock) == 7
    assert t.sleeps == []


def test_past_the_timeout_it_raises_a_timeout_error_naming_what_it_waited_for() -> None:
    t, asked = FakeTime(), []
    with pytest.raises(TimeoutError, match=r"after 1 s waiting for the tombstone at A"):
        wait_until(
            lambda: asked.append(t.now), timeout_s=1, what="the tombstone at A",
            interval_s=0.3, sleep=t.sleep, clock=t.clock,
        )  # fmt: skip
    assert sum(t.sleeps) == pytest.approx(1.0), "the last sleep is cut to the deadline"
    assert asked[-1] == pytest.approx(1.0), "asked once more at the deadline"


def test_it_waits_on_the_real_clock_too() -> None:
    calls = []
    assert wait_until(lambda: calls.append(1) or len(calls) >= 3, timeout_s=5, what="three",
                      interval_s=0.001)  # fmt: skip
