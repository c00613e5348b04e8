"""pipeline.support.retrying: the one backoff rule and the one retry loop."""

from __future__ import annotations

import random

import pytest

from pipeline.support.retrying import Backoff, retry_call


class Flaky:
    """Raises ``error`` on the first ``fails`` calls, then returns "ok"."""

    def __init__(self, fails: int, error: Exception) -> None:
        self.fails, self.error, self.calls = fails, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return "ok"


def test_without_jitter_the_delay_doubles_from_initial_and_stops_at_the_cap() -> None:
    b = Backoff(initial_s=0.1, max_s=1.0)
    assert [b.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.delay(10_000) == 1.0  # a huge attempt count does not overflow


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 8, 50])
def test_jitter_stays_within_its_fraction_of_the_nominal_delay_and_under_the_cap(
    attempt: int,
) -> None:
    b = Backoff(initial_s=0.2, max_s=3.0, multiplier=2.0, jitter=0.25)
    rng = random.Random(attempt)
    delays = [b.delay(attempt, rng=rng) for _ in range(500)]
    nominal = b.nominal(attempt)
    assert all(nominal * 0.75 - 1e-12 <= d <= min(3.0, nominal * 1.25) + 1e-12 for d in delays)
    assert len(set(delays)) > 1, "jitter spreads the waits"


def test_the_rule_refuses_values_it_cannot_honour() -> None:
    for bad in (
        {"initial_s": -1.0, "max_s": 1.0},
        {"initial_s": 0.1, "max_s": 1.0, "multiplier": 0.5},
        {"initial_s": 0.1, "max_s": 1.0, "jitter": 1.0},
    ):
        with pytest.raises(ValueError):
            Backoff(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Backoff(initial_s=0.1, max_s=1.0).delay(0)


def test_a_retriable_error_is_tried_again_with_the_rule_s_waits() -> None:
    flaky, waits, seen = Flaky(3, OSError("down")), [], []
    got = retry_call(
        flaky,
        retriable=lambda e: isinstance(e, OSError),
        backoff=Backoff(initial_s=0.01, max_s=0.03),
        wait=waits.append,
        on_retry=lambda exc, attempt, delay: seen.append((str(exc), attempt, delay)),
    )
    assert got == "ok" and flaky.calls == 4
    assert waits == pytest.approx([0.01, 0.02, 0.03])
    assert [(e, a) for e, a, _ in seen] == [("down", 1), ("down", 2), ("down", 3)]


def test_an_error_that_is_not_retriable_is_raised_at_once() -> None:
    flaky, waits = Flaky(1, ValueError("bad")), []
    with pytest.raises(ValueError, match="bad"):
        retry_call(
            flaky,
            retriable=lambda e: isinstance(e, OSError),
            backoff=Backoff(initial_s=0.01, max_s=0.01),
            wait=waits.append,
        )
    assert flaky.calls == 1 and waits == []


def test_the_deadline_bounds_the_waits_even_when_the_wait_returns_at_once() -> None:
    flaky, waits = Flaky(10**9, OSError("down")), []
    with pytest.raises(OSError, match="down"):  # the last error, unchanged
        retry_call(
            flaky,
            retriable=lambda e: True,
            backoff=Backoff(initial_s=0.1, max_s=0.4),
            deadline_s=1.0,
            wait=waits.append,
        )
    assert sum(waits) <= 1.0 and waits == pytest.approx([0.1, 0.2, 0.4])
    assert flaky.calls == len(waits) + 1


def test_the_deadline_counts_the_clock_too() -> None:
    now = [0.0]

    def slow() -> str:
        now[0] += 5.0  # each attempt takes 5 s on this clock
        raise OSError("slow")

    with pytest.raises(OSError):
        retry_call(
            slow,
            retriable=lambda e: True,
            backoff=Backoff(initial_s=0.1, max_s=0.1),
            deadline_s=12.0,
            wait=lambda s: None,
            clock=lambda: now[0],
        )
    assert now[0] == 15.0  # attempts at 0, 5 and 10 s; a wait after 15 s would pass 12 s


def test_attempts_bound_the_calls() -> None:
    flaky = Flaky(10**9, OSError("down"))
    with pytest.raises(OSError):
        retry_call(
            flaky,
            retriable=lambda e: True,
            backoff=Backoff(initial_s=0.0, max_s=0.0),
            attempts=3,
            wait=lambda s: None,
        )
    assert flaky.calls == 3


def test_a_stop_reported_by_the_wait_ends_the_retrying_with_the_last_error() -> None:
    flaky = Flaky(10**9, OSError("down"))
    with pytest.raises(OSError):
        retry_call(
            flaky,
            retriable=lambda e: True,
            backoff=Backoff(initial_s=0.01, max_s=0.01),
            wait=lambda s: True,  # Event.wait: the event is set
        )
    assert flaky.calls == 1
