"""The nemesis's schedule: faults, heals and recoveries written to the history, seeded."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pipeline.chaos.checker import check
from pipeline.chaos.history import HistoryWriter, read_history
from pipeline.chaos.nemesis import SCENARIOS, NemesisContext, play
from pipeline.chaos.workload import Workload


class FakeProc:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.alive, self.exit_code = name, log, True, None

    def stop(self) -> int:
        self.log.append(f"stop {self.name}")
        return 0

    def start(self) -> FakeProc:
        self.log.append(f"start {self.name}")
        return self


class FakeWorkload:
    """Runs for ``rounds`` nemesis turns; every outcomes() call sees one more message."""

    def __init__(self, rounds: int, log: list[str]) -> None:
        self.procs = {h: FakeProc(h, log) for h in ("A", "B")}
        self.rounds, self.n, self.sent = rounds, 0, 100

    def running(self) -> bool:
        self.rounds -= 1
        return self.rounds >= 0

    def outcomes(self) -> int:
        self.n += 1
        return self.n


def _play(tmp_path: Path, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    scenario = replace(SCENARIOS["clean-restart"], first_s=(0, 0), gap_s=(0, 0), hold_s=(0, 0))
    log: list[str] = []
    path = tmp_path / f"h{seed}.jsonl"
    history = HistoryWriter(path)
    ctx = NemesisContext(
        workload=cast(Workload, FakeWorkload(3, log)), history=history, rng=random.Random(seed)
    )
    faults = play(scenario, ctx)
    history.close()
    assert faults == 2
    return log, list(read_history(path))


def test_each_fault_is_written_with_its_heal_and_recovery_and_the_seed_fixes_the_targets(
    tmp_path: Path,
) -> None:
    log, rows = _play(tmp_path, 5)
    assert [r["op"] for r in rows] == ["fault", "heal", "recovered"] * 2
    assert all(r["seconds"] is not None for r in rows if r["op"] == "recovered")
    assert [r["target"] for r in rows if r["op"] == "heal"] == [e.split()[1] for e in log[::2]]
    assert log == _play(tmp_path, 5)[0], "same seed, same schedule"
    v = check(rows)
    assert v.ok and v.faults == 2 and v.slowest_recovery_s is not None
