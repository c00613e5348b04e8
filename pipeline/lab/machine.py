"""What the machine is doing while a run measures the model: CPU busy share from /proc/stat.

Linux only (the lab's target); elsewhere :meth:`CpuMeter.busy` returns ``None`` and the report
says the CPU was not measured. No psutil: two reads of the first line of /proc/stat.
"""

from __future__ import annotations

import os
from pathlib import Path

_STAT = Path("/proc/stat")


def _read() -> tuple[int, int] | None:
    try:
        first = _STAT.read_text(encoding="ascii").splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values[:8]), idle


class CpuMeter:
    """Busy share of all cores since the previous call (0..1)."""

    def __init__(self) -> None:
        self._last = _read()

    def busy(self) -> float | None:
        now = _read()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return None
        total, idle = now[0] - last[0], now[1] - last[1]
        return max(0.0, min(1.0, 1.0 - idle / total))


def cores() -> int:
    return os.cpu_count() or 1


def load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
