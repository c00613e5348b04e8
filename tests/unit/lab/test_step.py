"""The simulated step the pool members run: sleeps the scaled step time, logs each run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.lab.arrivals import Event
from pipeline.lab.step import PoisonStep, run_step
from pipeline.runtime.record import Record


def test_step_logs_each_run_and_the_poison_record_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "steps.jsonl"
    monkeypatch.setenv("FLEET_LAB_STEP_LOG", str(log))
    monkeypatch.setenv("FLEET_LAB_TIME_SCALE", "0.001")
    monkeypatch.setenv("FLEET_LAB_MEMBER", "m01")
    value = Event(t=1.0, seq=9, key=3, partition=3, step_s=2.0).payload()
    record = Record(
        topic="t", partition=3, offset=41, key=b"k3", value=value, headers=(), timestamp_ms=0
    )
    line = run_step(record, object())
    assert line["scheduled_s"] == pytest.approx(0.002)
    assert line["t1"] - line["t0"] >= 0.002
    assert (line["seq"], line["partition"], line["offset"], line["member"]) == (9, 3, 41, "m01")
    poison = Event(t=1.0, seq=10, key=0, partition=0, step_s=0.0, poison=True).payload()
    with pytest.raises(PoisonStep):
        run_step(poison, partition=0, offset=7)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["seq"] for x in lines] == [9, 10] and lines[1]["poison"] is True
