"""The one reader of Linux's ``/proc``: a process's (or thread's) state, CPU seconds and start,
its threads, their names and command line, the machine's CPU jiffies, and which process listens on
a port; and the one writer of a thread's name there (``comm``: what ``top -H``, ``ps -L`` and
``perf`` show).

Every reader answers ``None`` (or "gone") when the file cannot be read: the process ended, or
the platform has no ``/proc``. Figures are then absent, never invented.

``/proc/<pid>/stat`` is ``pid (comm) state ppid ...``; the command name may hold spaces and
parentheses, so the fields are read after its *last* ``)`` (proc(5)).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# thread states of a stopped or finished thread (proc(5): stopped, tracing stop, zombie, dead)
STOPPED_OR_GONE = frozenset("TtZX")


@dataclass(frozen=True, kw_only=True)
class ProcStat:
    """The fields of one ``stat`` line the house reads; times in clock ticks."""

    state: str
    utime: int
    stime: int
    cutime: int  # user time of the children it waited for
    cstime: int
    start_ticks: int  # when it started, in ticks from boot (proc(5) field 22)

    @property
    def cpu_s(self) -> float:
        """User + system seconds (every thread of a process)."""
        return (self.utime + self.stime) / CLK_TCK

    @property
    def cpu_with_children_s(self) -> float:
        """:attr:`cpu_s` plus the children it reaped (an injector's forks count against its
        gateway)."""
        return (self.utime + self.stime + self.cutime + self.cstime) / CLK_TCK


def parse_stat(line: str) -> ProcStat | None:
    """One ``/proc/.../stat`` line; None when it is cut or malformed."""
    fields = line.rsplit(")", 1)[-1].split()  # fields[0] is state, proc(5) field 3
    try:
        return ProcStat(
            state=fields[0],
            utime=int(fields[11]),
            stime=int(fields[12]),
            cutime=int(fields[13]),
            cstime=int(fields[14]),
            start_ticks=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def proc_stat(pid: int, tid: int | None = None) -> ProcStat | None:
    """``/proc/<pid>/stat`` (or a thread's, ``/proc/<pid>/task/<tid>/stat``); None once gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        return parse_stat(Path(path).read_text(encoding="ascii", errors="replace"))
    except OSError:
        return None


def started_at(pid: int) -> float | None:
    """When ``pid``'s process started, in :func:`time.time` seconds (to a clock tick or two);
    None once it is gone. Its ``start_ticks`` count from boot, and ``/proc/uptime`` says how
    long ago that was."""
    stat = proc_stat(pid)
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return None if stat is None else time.time() - uptime + stat.start_ticks / CLK_TCK


def cpu_s(pid: int, *, children: bool = False) -> float | None:
    """CPU seconds of ``pid`` (with ``children``: the children it reaped too); None once gone."""
    stat = proc_stat(pid)
    if stat is None:
        return None
    return stat.cpu_with_children_s if children else stat.cpu_s


def thread_ids(pid: int) -> list[int] | None:
    """The threads of ``pid``; None once it is gone."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return None


def thread_cpu_s(pid: int, tid: int) -> float | None:
    """CPU seconds one thread ran, to the nanosecond where the kernel keeps scheduler statistics
    (``schedstat``: its time on a CPU, user and system), else at the clock tick (``stat``);
    None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        stat = proc_stat(pid, tid)
        return None if stat is None else stat.cpu_s


def thread_runs(pid: int, tid: int) -> tuple[float, int] | None:
    """One thread's scheduler figures (``schedstat``): the seconds it waited on a run queue,
    runnable but not running, and how many times it was put on a CPU (each wake, and each
    return after it was preempted); None once it is gone or where the kernel keeps none."""
    try:
        _, waited_ns, slices = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:3]
        return int(waited_ns) / 1e9, int(slices)
    except (OSError, ValueError):
        return None


def thread_name(pid: int, tid: int) -> str | None:
    """The kernel's name of one thread (``comm``, at most 15 bytes); None once it is gone."""
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text(errors="replace").rstrip("\n")
    except OSError:
        return None


def name_threads(names: dict[int, str]) -> None:
    """Give this process's threads (native id -> name) their names in the kernel, cut to the
    15 bytes it keeps. A thread gone meanwhile, or no ``/proc``, is skipped."""
    for tid, name in names.items():
        try:
            with open(f"/proc/self/task/{tid}/comm", "w", encoding="utf-8") as f:
                f.write(name.encode()[:15].decode(errors="ignore"))
        except OSError:
            continue


def all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (``T``/``t``) or gone; a process gone counts too."""
    for tid in thread_ids(pid) or ():
        stat = proc_stat(pid, tid)
        if stat is not None and stat.state not in STOPPED_OR_GONE:  # None: the thread ended
            return False
    return True


def cmdline(pid: int) -> list[bytes] | None:
    """The arguments ``pid`` was started with; None once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


@dataclass(frozen=True)
class MachineCpu:
    """Jiffies over all cores since boot, from the first line of ``/proc/stat``."""

    total: int
    idle: int  # idle + iowait

    @property
    def busy(self) -> int:
        return self.total - self.idle


def parse_machine(first_line: str) -> MachineCpu | None:
    """The ``cpu ...`` line of ``/proc/stat``: the first eight counters (guest time is already
    inside user), idle + iowait as idle."""
    try:
        values = [int(v) for v in first_line.split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
    except (IndexError, ValueError):
        return None
    return MachineCpu(total=sum(values[:8]), idle=idle)


def machine_cpu() -> MachineCpu | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return parse_machine(f.readline())
    except OSError:
        return None


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
