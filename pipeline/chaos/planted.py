"""Planted bugs: the checker must catch them (``docs/chaos.md``).

A checker that has never failed proves nothing. Each :class:`Plant` switches on one ordering
R-ACK-2, R-ACK-8 or R-OUT-4 forbids, through a test-only hook (``FLEET_FAULT=plant_*``, read by the gateway process's
entry point into :class:`pipeline.hooks.Hooks`) together with the fault that makes it bite (the
process kills itself inside the window the bug opens). The real workload then runs with a
supervisor that restarts a gateway that died, as the nemesis's heal does; after heal-and-drain
the checker must report the violation named in the plant.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .checker import Verdict, Violation, check
from .history import HistoryWriter, Op, read_history
from .workload import Workload, WorkloadConfig


@dataclass(frozen=True, kw_only=True)
class Plant:
    name: str
    fault: str  # FLEET_FAULT for the host's gateway (pipeline/hooks.py)
    host: str  # whose gateway carries the bug
    catches: Violation  # what the checker must report
    bug: str


PLANTS: dict[str, Plant] = {
    p.name: p
    for p in (
        Plant(
            name="commit-first",
            fault="plant_commit_first",
            host="B",
            catches=Violation.LOST,
            bug="host B's inbox commits its offsets BEFORE the batch's transaction (holds and "
            "dedupe rows), then dies in between: the held REPLYs are gone, the offsets past them",
        ),
        Plant(
            name="dedupe-apart",
            fault="plant_dedupe_apart",
            host="B",
            catches=Violation.LOST,
            bug="host B writes its dedupe rows in a transaction of their own, then dies before "
            "the holds: the redelivered REPLYs are dropped as duplicates of nothing",
        ),
        Plant(
            name="ack-first",
            fault="plant_ack_first",
            host="A",
            catches=Violation.LOST,
            bug="host A's relay marks outbox rows sent BEFORE the broker's delivery report "
            "(before producing them), then dies in between: the rows never leave",
        ),
    )
}


class Supervisor:
    """Restarts any gateway of ``workload`` that exited, writing ``fault`` (the exit) and
    ``heal`` (the restart) rows, until stopped."""

    def __init__(self, workload: Workload, history: HistoryWriter, name: str) -> None:
        self.workload, self.history, self.name = workload, history, name
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for p in self.workload.procs.values():
                if p.proc is not None and not p.alive:
                    self.history.write(
                        Op.FAULT, name=self.name, target=p.name, exit_code=p.exit_code
                    )
                    t0 = time.monotonic()
                    p.start()
                    self.restarts += 1
                    self.history.write(
                        Op.HEAL,
                        name=self.name,
                        target=p.name,
                        restart_s=round(time.monotonic() - t0, 3),
                    )


def run_planted(
    plant: Plant,
    *,
    bootstrap: str,
    root: Path,
    duration_s: float = 10.0,
    rate_per_s: float = 10.0,
    drain_timeout_s: float = 20.0,
) -> tuple[Verdict, int]:
    """One run of the workload with ``plant`` on its host; returns the verdict and how many
    times a gateway died (the planted fault firing) and was restarted."""
    root.mkdir(parents=True, exist_ok=True)
    history_path = root / f"planted-{plant.name}.jsonl"
    history = HistoryWriter(history_path)
    w = Workload(
        WorkloadConfig(
            bootstrap=bootstrap,
            root=root / plant.name,
            rate_per_s=rate_per_s,
            duration_s=duration_s,
            drain_timeout_s=drain_timeout_s,
        ),
        history,
    )
    restarts = run_supervised(
        w, history, name=f"planted:{plant.name}", proc=plant.host, fault=plant.fault
    )
    return check(read_history(history_path)), restarts


def run_supervised(w: Workload, history: HistoryWriter, *, name: str, proc: str, fault: str) -> int:
    """One run of ``w`` (set up, stream, drain, collect) with ``FLEET_FAULT=fault`` on process
    ``proc`` and a :class:`Supervisor` restarting whatever dies; returns the restarts."""
    sup = Supervisor(w, history, name)
    try:
        w.setup()
        w.procs[proc].env["FLEET_FAULT"] = fault
        w.start()
        sup.start()
        w.run_in_background()
        w.join()
        w.drain()
        sup.stop()
        w.collect()
    finally:
        sup.stop()
        w.stop()
        history.close()
    return sup.restarts
