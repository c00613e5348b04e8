"""The lab's poison-capable step: the pool's sleep, scaled; the poison record always fails."""

from __future__ import annotations

import pytest

from pipeline.lab.arrivals import Event
from pipeline.lab.step import PoisonStep, run_step
from pipeline.record import Record


def _record(ev: Event) -> Record:
    return Record(
        topic="t",
        partition=ev.partition,
        offset=1,
        key=b"k",
        value=ev.payload(),
        headers=(),
        timestamp_ms=0,
    )


def test_sleeps_the_scaled_step_and_fails_the_poison_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEET_LAB_TIME_SCALE", "0.001")
    out = run_step(_record(Event(t=1.0, seq=9, key=3, partition=3, step_s=2.0)))
    assert out["slept_s"] == pytest.approx(0.002)
    with pytest.raises(PoisonStep):
        run_step(_record(Event(t=1.0, seq=10, key=0, partition=0, step_s=0.0, poison=True)))
