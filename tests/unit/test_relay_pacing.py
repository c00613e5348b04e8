"""The long-running relay's pass spacing (pipeline/outbox/pacing.py): a pass starts no sooner
than the spacing after the last pass that shipped rows; after an idle spell, a pass that shipped
nothing, or a stop, it starts at once (R-OUT-2: its own supervision, never past a stop)."""

from __future__ import annotations

import threading

from pipeline.outbox.pacing import Pacing


class _Stop:
    """``threading.Event.wait`` recorded, never slept."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return False


def test_a_pass_after_one_that_shipped_waits_out_the_spacing() -> None:
    pacing, stop = Pacing(0.5), _Stop()
    started = pacing.hold(stop)  # type: ignore[arg-type]
    assert stop.waits == []  # nothing shipped yet: at once
    pacing.shipped(started, 2)
    pacing.hold(stop)  # type: ignore[arg-type]
    assert len(stop.waits) == 1 and 0 < stop.waits[0] <= 0.5


def test_a_pass_after_one_that_shipped_nothing_or_long_ago_starts_at_once() -> None:
    pacing, stop = Pacing(0.5), _Stop()
    pacing.shipped(pacing.hold(stop), 0)  # type: ignore[arg-type]
    pacing.hold(stop)  # type: ignore[arg-type]
    pacing.shipped(-1e9, 3)  # the last shipping pass started long ago (an idle spell)
    pacing.hold(stop)  # type: ignore[arg-type]
    assert stop.waits == []


def test_no_spacing_never_waits_and_a_stop_ends_the_wait() -> None:
    pacing, stop = Pacing(0.0), _Stop()
    pacing.shipped(pacing.hold(stop), 5)  # type: ignore[arg-type]
    pacing.hold(stop)  # type: ignore[arg-type]
    assert stop.waits == []
    stopped = threading.Event()
    stopped.set()
    long = Pacing(3600.0)
    long.shipped(long.hold(stopped), 1)
    long.hold(stopped)  # returns at once: the stop is set
