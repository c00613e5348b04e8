"""The gateway's incarnation counter (docs/presence.md "Order"), on SQLite and PostgreSQL: each
start takes a value strictly above every earlier one of its host, whatever the wall clock says."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pipeline.host.incarnation import take_incarnation

pytestmark = pytest.mark.postgres

T0 = 1_796_000_000_000  # a wall clock in ms


def test_each_start_takes_one_more_whatever_the_clock_says(sessions: Any) -> None:
    first = take_incarnation(sessions, "b", clock_ms=lambda: T0)
    assert first == T0 // 1000, "a store that remembers nothing starts from the clock"
    # the clock goes back an hour: the count does not care
    behind = take_incarnation(sessions, "b", clock_ms=lambda: T0 - 3_600_000)
    assert behind == first + 1
    assert take_incarnation(sessions, "b", clock_ms=lambda: T0) == first + 2
    assert take_incarnation(sessions, "other", clock_ms=lambda: 5_000) == 5, "per host"


def test_a_start_goes_above_what_the_roster_has_seen_of_its_host(sessions: Any) -> None:
    """A wiped store (or a twin on another store) meets a higher incarnation on the roster."""
    assert take_incarnation(sessions, "b", seen=T0, clock_ms=lambda: T0) == T0 + 1
    assert take_incarnation(sessions, "b", seen=T0 + 40, clock_ms=lambda: T0) == T0 + 41
    assert take_incarnation(sessions, "b", seen=3, clock_ms=lambda: T0) == T0 + 42


def test_two_starts_on_one_store_take_two_values(sessions: Any) -> None:
    """Two gateways with one host id on one store (the ``twin-host`` chaos scenario): distinct incarnations."""
    take_incarnation(sessions, "b", clock_ms=lambda: T0)  # the row exists: the UPDATE locks it
    got: list[int] = []
    errors: list[Exception] = []

    def start() -> None:
        try:
            got.append(take_incarnation(sessions, "b", clock_ms=lambda: T0))
        except Exception as exc:  # noqa: BLE001 - any failure of a thread is reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(got) == [T0 // 1000 + i for i in range(1, 5)]
