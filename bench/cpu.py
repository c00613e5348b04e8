"""Where a phase's CPU went: the machine's busy share and each named process's CPU seconds
(children it reaped included: an injector's forks count against its gateway), read from
``/proc`` before and after. A latency row that misses its target on a saturated machine says so
in numbers (Linux only; elsewhere the figures are absent, never invented).

A gateway's CPU is also broken down by thread role (``gw-inbox``, ``gw-relay``,
``gw-socket-reader``, ``inject-worker``, ``librdkafka`` ...: the names a gateway gives its
threads in the kernel, docs/observability.md): ``<name>_threads_cpu_s``, each thread's CPU over
the window (one that started inside it from zero; one that ended inside it is not counted).

A *tree* (``trees=``) is a server and its live children, counted as one: the PostgreSQL
postmaster and its backends. Its CPU at a moment is the root's (with the children it reaped)
plus each live child's, so a backend that ends inside the window is counted once, in the root's
reaped-children time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.observability.thread_cpu import role_of
from pipeline.support import procfs


def us_per_message(cpu_s: float | None, messages: int) -> float | None:
    """CPU microseconds per message: ``None`` when either side is missing, never a guess."""
    if cpu_s is None or messages <= 0:
        return None
    return round(cpu_s * 1e6 / messages, 1)


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from each ``/proc/<n>/stat``)."""
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            line = Path(f"/proc/{entry}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        fields = line.rsplit(")", 1)[-1].split()  # state, ppid, ...
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


def tree_cpu_s(root: int) -> float | None:
    """CPU seconds of ``root`` with the children it reaped, plus each live child's."""
    own = procfs.cpu_s(root, children=True)
    if own is None:
        return None
    return own + sum(procfs.cpu_s(c, children=True) or 0.0 for c in children(root))


def fresh_databases(url: str, prefix: str) -> Callable[[], str]:
    """A function returning the URL of a new, empty database on the server of ``url`` (a
    PostgreSQL SQLAlchemy URL) at each call: ``<prefix>_<8 hex>``."""
    import uuid

    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    base = url.rpartition("/")[0]

    def fresh() -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{base}/{name}"

    return fresh


def postmaster_pid(data_dir: Path | None) -> int | None:
    """The PostgreSQL server's pid: the first line of ``postmaster.pid`` in its data folder."""
    if data_dir is None:
        return None
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def threads_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its role and CPU seconds so far."""
    out = {}
    for tid in procfs.thread_ids(pid) or ():
        name, seconds = procfs.thread_name(pid, tid), procfs.thread_cpu_s(pid, tid)
        if name is not None and seconds is not None:  # the main thread: the process's name
            out[tid] = ("main" if tid == pid else role_of(name), seconds)
    return out


def threads_runs(pid: int) -> dict[int, tuple[str, float, int]]:
    """Each live thread of ``pid``: its role, the seconds it waited on a run queue and how many
    times it was put on a CPU so far (:func:`procfs.thread_runs`)."""
    out = {}
    for tid in procfs.thread_ids(pid) or ():
        name, got = procfs.thread_name(pid, tid), procfs.thread_runs(pid, tid)
        if name is not None and got is not None:
            out[tid] = ("main" if tid == pid else role_of(name), *got)
    return out


def runs_by_role(
    before: dict[int, tuple[str, float, int]], after: dict[int, tuple[str, float, int]]
) -> dict[str, tuple[float, int]]:
    """Per role between two readings of :func:`threads_runs`: seconds waited for a CPU, times
    put on one (a thread started inside the window counts from its start; one that ended
    inside it is not counted: its figures are gone)."""
    out: dict[str, tuple[float, int]] = {}
    for tid, (role, waited, slices) in after.items():
        _, waited0, slices0 = before.get(tid, (role, 0.0, 0))
        w, n = out.get(role, (0.0, 0))
        out[role] = (w + waited - waited0, n + slices - slices0)
    return out


def by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds per role between two readings of :func:`threads_cpu_s`."""
    out: dict[str, float] = {}
    for tid, (role, seconds) in after.items():
        spent = seconds - (before[tid][1] if tid in before else 0.0)
        out[role] = round(out.get(role, 0.0) + spent, 4)
    return out


class CpuWindow:
    """``start()`` ... ``stop()``: the busy share of every core and, per named process (or
    tree), CPU seconds and cores used over the window."""

    def __init__(self, pids: dict[str, int], trees: dict[str, int] | None = None) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self.trees = dict(trees or {})
        self._t0 = 0.0
        self._m0: procfs.MachineCpu | None = None
        self._p0: dict[str, float | None] = {}
        # the gateways' threads (a tree named gateway_*: its root process's threads)
        self._threads = {n: p for n, p in self.trees.items() if n.startswith("gateway_")}
        self._t0_threads: dict[str, dict[int, tuple[str, float]]] = {}
        self._t0_runs: dict[str, dict[int, tuple[str, float, int]]] = {}

    def _read(self) -> dict[str, float | None]:
        out = {name: procfs.cpu_s(pid, children=True) for name, pid in self.pids.items()}
        out.update({name: tree_cpu_s(root) for name, root in self.trees.items()})
        return out

    def start(self) -> CpuWindow:
        self._t0 = time.monotonic()
        self._m0 = procfs.machine_cpu()
        self._p0 = self._read()
        self._t0_threads = {n: threads_cpu_s(p) for n, p in self._threads.items()}
        self._t0_runs = {n: threads_runs(p) for n, p in self._threads.items()}
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self._t0
        out: dict[str, Any] = {"wall_s": round(wall, 2), "cores": os.cpu_count()}
        m0, m1 = self._m0, procfs.machine_cpu()
        if m0 is not None and m1 is not None and m1.total > m0.total:
            out["machine_busy"] = round((m1.busy - m0.busy) / (m1.total - m0.total), 3)
        for name, pid in self._threads.items():
            out[f"{name}_threads_cpu_s"] = by_role(
                self._t0_threads.get(name, {}), threads_cpu_s(pid)
            )
            # how often its threads were put on a CPU, and how long they waited for one
            roles = runs_by_role(self._t0_runs.get(name, {}), threads_runs(pid))
            if wall > 0 and roles:
                out[f"{name}_runs_per_s"] = round(sum(n for _, n in roles.values()) / wall)
                out[f"{name}_runqueue_ms_per_s"] = round(
                    sum(w for w, _ in roles.values()) * 1e3 / wall, 1
                )
                out[f"{name}_threads_runs_per_s"] = {
                    r: round(n / wall) for r, (_, n) in roles.items()
                }
        for name, after in self._read().items():
            before = self._p0.get(name)
            if before is not None and after is not None and wall > 0:
                out[f"{name}_cpu_s"] = round(after - before, 3)
                out[f"{name}_cores"] = round((after - before) / wall, 3)
        return out
