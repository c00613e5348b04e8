"""The long-running relay's pass spacing (pipeline/outbox/pacing.py): a pass starts no sooner
than the spacing after the last pass that shipped rows; after an idle spell, a pass that shipped
nothing, or a stop, it starts at once (R-OUT-2: its own supervision, never past a stop)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.outbox import Relay
from pipeline.outbox.pacing import Pacing
from pipeline.store import make_engine
from tests.unit.relay_fakes import QuietProducer


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


def test_the_hold_never_waits_past_until() -> None:
    """The kept acks fall due at ``until``: the spacing is cut short there, and skipped when
    ``until`` has passed."""
    pacing, stop = Pacing(0.5), _Stop()
    started = pacing.hold(stop)  # type: ignore[arg-type]
    pacing.shipped(started, 1)
    pacing.hold(stop, until=started + 0.1)  # type: ignore[arg-type]
    pacing.hold(stop, until=started - 1.0)  # type: ignore[arg-type]
    assert len(stop.waits) == 1 and 0 < stop.waits[0] <= 0.1


def test_the_relay_sleeps_the_spacing_out_before_it_waits_for_a_wake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load a commit's wake finds the relay asleep on the spacing, so it wakes no thread:
    after a pass that shipped and read everything, the relay holds, then waits for a wake."""
    engine = make_engine(f"sqlite:///{tmp_path / 'a.sqlite'}")
    relay = Relay(
        engine=engine, bootstrap="unused:1", producer_factory=lambda _conf: QuietProducer()
    )
    stop = threading.Event()
    steps: list[str] = []
    passes = [1, 1]

    def one_pass() -> int:
        steps.append("pass")
        relay._drained_clean = True  # read every unsent row of its branches
        if not passes:
            stop.set()
            return 0
        return passes.pop()

    class _Pacing:
        def hold(self, _stop: threading.Event, until: float | None = None) -> float:
            steps.append("hold")
            return 0.0

        def shipped(self, _started: float, _rows: int) -> None:
            pass

    def wait(_stop: threading.Event, *, until: float | None = None) -> bool:
        steps.append("wait")
        return True  # woken

    monkeypatch.setattr(relay, "_one_pass", one_pass)
    monkeypatch.setattr(relay, "_pacing", _Pacing())
    monkeypatch.setattr(relay.idle, "wait", wait)
    relay.run_forever(stop)
    engine.dispose()
    assert steps[:7] == ["hold", "pass", "hold", "wait", "hold", "pass", "hold"]
