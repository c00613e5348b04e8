"""Where a phase's CPU went: the machine's busy share and each named process's CPU seconds
(children it reaped included: an injector's forks count against its gateway), read from
``/proc`` before and after. A latency row that misses its target on a saturated machine says so
in numbers (Linux only; elsewhere the figures are absent, never invented)."""

from __future__ import annotations

import os
import time
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine() -> tuple[int, int] | None:
    """(busy, total) jiffies over all cores since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def _process_s(pid: int) -> float | None:
    """utime + stime + cutime + cstime of ``pid``, in seconds."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after its last ')'
    fields = raw[raw.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / _TICK


class CpuWindow:
    """``start()`` ... ``stop()``: the busy share of every core and each process's CPU seconds
    and cores used over the window."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self._t0 = 0.0
        self._m0: tuple[int, int] | None = None
        self._p0: dict[str, float | None] = {}

    def start(self) -> CpuWindow:
        self._t0 = time.monotonic()
        self._m0 = _machine()
        self._p0 = {name: _process_s(pid) for name, pid in self.pids.items()}
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self._t0
        out: dict[str, Any] = {"wall_s": round(wall, 2), "cores": os.cpu_count()}
        m1 = _machine()
        if self._m0 is not None and m1 is not None and m1[1] > self._m0[1]:
            out["machine_busy"] = round((m1[0] - self._m0[0]) / (m1[1] - self._m0[1]), 3)
        for name, pid in self.pids.items():
            before, after = self._p0.get(name), _process_s(pid)
            if before is not None and after is not None and wall > 0:
                out[f"{name}_cores"] = round((after - before) / wall, 3)
        return out


def listener_pid(port: int) -> int | None:
    """The process listening on loopback ``port`` (the broker under a bootstrap address), found
    through ``/proc/net/tcp`` and the processes' socket fds; None if not visible to us."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    wanted = {f"socket:[{i}]" for i in inodes}
    if not wanted:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return int(pid)
            except OSError:
                continue
    return None
