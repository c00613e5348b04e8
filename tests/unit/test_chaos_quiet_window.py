"""The chaos workload's quiet window (the checker's ``CHAOS_HOT_LOOP`` rule): it
measures a gateway idling, not a gateway a fault restarted still starting up.

Found by ``twin-host`` at 20 repetitions: the drain ended (nothing was pending on B) while the
restarted B was importing, and its start-up's 1.8 CPU s in 3 s of quiet read as a hot loop."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.chaos.checker import Violation, check
from pipeline.chaos.history import HistoryWriter, read_history
from pipeline.chaos.workload import Workload, WorkloadConfig


class Booting:
    """A gateway process that burns ``rate`` CPU s per second until ``boot_s`` has passed
    (imports, joining), prints its running line then, and afterwards burns ``idle_rate``."""

    def __init__(self, boot_s: float, rate: float = 1.0, idle_rate: float = 0.0) -> None:
        self.t0 = time.monotonic()
        self.boot_s, self.rate, self.idle_rate = boot_s, rate, idle_rate
        self.alive = True

    def _elapsed(self) -> float:
        return time.monotonic() - self.t0

    def ready(self) -> bool:
        return self._elapsed() >= self.boot_s

    def cpu_s(self) -> float:
        e = self._elapsed()
        booting = min(e, self.boot_s)
        return booting * self.rate + max(0.0, e - self.boot_s) * self.idle_rate


def quiet(tmp_path: Path, procs: dict[str, Booting], ready_timeout_s: float = 5.0) -> Workload:
    config = WorkloadConfig(
        bootstrap="127.0.0.1:1", root=tmp_path, quiet_s=0.4, ready_timeout_s=ready_timeout_s
    )
    history = HistoryWriter(tmp_path / "h.jsonl")
    w = Workload(config, history)
    w.procs = procs  # type: ignore[assignment]
    try:
        w._quiet_window()
    finally:
        history.close()
    return w


def test_a_gateway_still_starting_is_not_measured_as_idle(tmp_path: Path) -> None:
    w = quiet(tmp_path, {"A": Booting(0.0), "B": Booting(0.6)})
    history = list(read_history(tmp_path / "h.jsonl"))
    rows = {r["name"]: r for r in history if r["op"] == "cpu"}
    assert set(rows) == {"A", "B"}
    assert rows["B"]["cpu_s"] < 0.1, rows  # its 0.6 CPU s of start-up are before the window
    assert check(history).ok
    assert w.timings["settle_s"] >= 0.5


def test_a_running_gateway_that_burns_a_core_still_hot_loops(tmp_path: Path) -> None:
    quiet(tmp_path, {"A": Booting(0.0), "B": Booting(0.1, idle_rate=1.0)})
    v = check(read_history(tmp_path / "h.jsonl"))
    assert [(f.code, f.msg_id) for f in v.findings] == [(Violation.HOT_LOOP, "B")]


def test_a_gateway_that_never_comes_up_is_measured_after_the_bound(tmp_path: Path) -> None:
    """The wait is bounded: a start-up that never ends is not hidden, the window measures it."""
    w = quiet(tmp_path, {"B": Booting(60.0)}, ready_timeout_s=0.3)
    v = check(read_history(tmp_path / "h.jsonl"))
    assert [(f.code, f.msg_id) for f in v.findings] == [(Violation.HOT_LOOP, "B")]
    assert w.timings["settle_s"] < 5.0
