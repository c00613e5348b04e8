"""What the machine is doing while a run measures the model: CPU busy share from /proc/stat.

Linux only (the lab's target); elsewhere :meth:`CpuMeter.busy` returns ``None`` and the report
says the CPU was not measured. No psutil: two reads of the first line of /proc/stat
(:mod:`pipeline.support.procfs`).
"""

from __future__ import annotations

import os
import time

from pipeline.support import procfs


class CpuMeter:
    """Busy share of all cores since the previous call (0..1)."""

    def __init__(self) -> None:
        self._last = procfs.machine_cpu()

    def busy(self) -> float | None:
        now = procfs.machine_cpu()
        last, self._last = self._last, now
        if now is None or last is None or now.total <= last.total:
            return None
        total, idle = now.total - last.total, now.idle - last.idle
        return max(0.0, min(1.0, 1.0 - idle / total))


def cores() -> int:
    return os.cpu_count() or 1


def load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


class ProcessCpu:
    """Cores used by a changing set of processes (the run's members and producer) between
    calls, so the report can tell the run's own load from everyone else's on a shared machine.
    A process that exits between two calls loses its last interval (undercounts, never over)."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}
        self._at = time.monotonic()
        self.total_s = 0.0  # CPU seconds of the processes, summed over every interval

    def reset(self, pids: list[int]) -> None:
        """Start counting from now (what the processes used so far is not counted)."""
        self.cores(pids)
        self.total_s = 0.0

    def cores(self, pids: list[int]) -> float | None:
        now = time.monotonic()
        seen = {pid: s for pid in pids if (s := procfs.cpu_s(pid)) is not None}
        used = sum(max(0.0, s - self._last.get(pid, s)) for pid, s in seen.items())
        dt, self._at, self._last = now - self._at, now, seen
        self.total_s += used
        if dt <= 0 or not seen:
            return None
        return used / dt
