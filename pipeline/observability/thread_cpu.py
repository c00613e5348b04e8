"""Which loop of a process spends its CPU: CPU seconds per thread, read from ``/proc`` at scrape
time (to the nanosecond where the kernel keeps scheduler statistics) and labelled by the thread's role (``gw-inbox``, ``gw-relay``, ``gw-socket-reader``,
``inject-worker``, ``librdkafka`` ...), as ``fleet_thread_cpu_seconds_total{thread}``.

A gateway's CPU per message is the figure its operators watch (docs/performance.md); this
metric says which loop to look at when it grows. It also names the process's Python threads in
the kernel (:func:`name_os_threads`), so ``top -H``, ``ps -L`` and ``perf`` show the same names.

The label is a role, not a thread: the threads of one role (one inject worker per worker, the
verify pool) are summed, so the label set stays small however many workers a host runs. A
thread that ends keeps counting: its last reading is carried into its role's total, so the
counter never goes down (what the thread spent after the last scrape is not seen). Linux only;
without ``/proc`` the family is empty, never invented.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from pipeline.support import procfs

METRIC = "fleet_thread_cpu_seconds"

# a thread name's prefix -> its role (every other Python thread is labelled by its own name)
_ROLES = (
    ("inject-", "inject-worker"),  # one per worker: ``inject-<gid>``
    ("ThreadPoolExecutor-", "pool"),  # the verify pool's threads
    ("rdk:", "librdkafka"),  # the Kafka clients' own threads (not Python's)
    ("gw-socket-poll", "gw-socket-poll"),
)


def role_of(name: str) -> str:
    """The label of a thread called ``name``."""
    if name == "MainThread":
        return "main"
    for prefix, role in _ROLES:
        if name.startswith(prefix):
            return role
    return name


def python_threads() -> dict[int, str]:
    """This process's live Python threads: native id -> name."""
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


_named: dict[int, str] = {}  # native id -> the name this process gave it in the kernel
_naming = threading.Lock()


def name_os_threads() -> None:
    """Name this process's Python threads in the kernel after their Python names (cut to 15
    bytes: ``gw-socket-reade``). The main thread keeps its name: in the kernel it is the
    process's name (``ps``, ``pgrep``). Cheap to call often: a thread is named once (again only if its
    native id now belongs to a thread of another name); threads started later are named at the
    next call."""
    with _naming:
        live = python_threads()
        live.pop(threading.main_thread().native_id or -1, None)  # its name is the process's
        new = {tid: name for tid, name in live.items() if _named.get(tid) != name}
        if new:
            procfs.name_threads(new)
        _named.clear()
        _named.update(live)


class ThreadCpuCollector(Collector):
    """``fleet_thread_cpu_seconds_total{thread}`` for the process it runs in."""

    def __init__(self, pid: int | None = None) -> None:
        self._pid = pid or os.getpid()
        self._last: dict[int, tuple[str, float]] = {}  # native id -> (role, seconds seen)
        self._ended: dict[str, float] = {}  # role -> seconds of its threads that ended
        self._lock = threading.Lock()

    def read(self) -> dict[str, float]:
        """CPU seconds per role, ended threads included."""
        pid = self._pid
        tids = procfs.thread_ids(pid)
        if tids is None:
            return {}
        named = python_threads() if pid == os.getpid() else {}
        with self._lock:
            now: dict[int, tuple[str, float]] = {}
            last = self._last
            for tid in tids:
                seconds = procfs.thread_cpu_s(pid, tid)
                if seconds is None:
                    continue  # ended between the listing and the read
                seen = last.get(tid)
                if seen is not None:
                    if seconds >= seen[1]:
                        # the same thread: its role stays (a Python thread that has just ended
                        # is no longer listed by ``threading`` but is in /proc for a moment)
                        now[tid] = (seen[0], seconds)
                        continue
                    # less than before: a new thread under the id of one that ended
                    self._ended[seen[0]] = self._ended.get(seen[0], 0.0) + seen[1]
                name = named.get(tid) or procfs.thread_name(pid, tid)
                if name is not None:
                    now[tid] = (role_of(name), seconds)
            for tid, (role, seconds) in last.items():
                if tid not in now:
                    self._ended[role] = self._ended.get(role, 0.0) + seconds
            self._last = now
            totals = dict(self._ended)
        for role, seconds in now.values():
            totals[role] = totals.get(role, 0.0) + seconds
        return totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            METRIC,
            "CPU seconds (user + system) spent by this process's threads, by the thread's role",
            labels=["thread"],
        )
        for role, seconds in sorted(self.read().items()):
            family.add_metric([role], seconds)
        yield family


def register_thread_cpu(registry: CollectorRegistry) -> ThreadCpuCollector:
    """Add the per-thread CPU family to ``registry`` (one per process)."""
    collector = ThreadCpuCollector()
    registry.register(collector)
    return collector
