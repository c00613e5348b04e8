"""Where a phase's CPU went: the machine's busy share and each named process's CPU seconds
(children it reaped included: an injector's forks count against its gateway), read from
``/proc`` before and after. A latency row that misses its target on a saturated machine says so
in numbers (Linux only; elsewhere the figures are absent, never invented)."""

from __future__ import annotations

import os
import time
from typing import Any

from pipeline.support import procfs


class CpuWindow:
    """``start()`` ... ``stop()``: the busy share of every core and each process's CPU seconds
    and cores used over the window."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self._t0 = 0.0
        self._m0: procfs.MachineCpu | None = None
        self._p0: dict[str, float | None] = {}

    def start(self) -> CpuWindow:
        self._t0 = time.monotonic()
        self._m0 = procfs.machine_cpu()
        self._p0 = {name: procfs.cpu_s(pid, children=True) for name, pid in self.pids.items()}
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self._t0
        out: dict[str, Any] = {"wall_s": round(wall, 2), "cores": os.cpu_count()}
        m0, m1 = self._m0, procfs.machine_cpu()
        if m0 is not None and m1 is not None and m1.total > m0.total:
            out["machine_busy"] = round((m1.busy - m0.busy) / (m1.total - m0.total), 3)
        for name, pid in self.pids.items():
            before, after = self._p0.get(name), procfs.cpu_s(pid, children=True)
            if before is not None and after is not None and wall > 0:
                out[f"{name}_cores"] = round((after - before) / wall, 3)
        return out
