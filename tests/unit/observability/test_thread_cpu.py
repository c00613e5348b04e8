"""CPU per thread role, read from this process's ``/proc`` (docs/observability.md): the
counter sees what a thread spent, keeps it after the thread ends, and names threads in the
kernel. R-OBS-5: the label is a role, bounded however many workers run."""

from __future__ import annotations

import os
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from pipeline.observability.thread_cpu import (
    ThreadCpuCollector,
    name_os_threads,
    register_thread_cpu,
    role_of,
)
from pipeline.support import procfs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")


def _burn(cpu_s: float) -> None:
    """Spend ``cpu_s`` of this thread's own CPU (not wall time)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        sum(range(1000))


def test_roles_are_bounded_one_label_for_every_inject_worker() -> None:
    assert role_of("inject-worker-b") == role_of("inject-worker-b2") == "inject-worker"
    assert role_of("rdk:broker1") == role_of("rdk:main") == "librdkafka"
    assert role_of("ThreadPoolExecutor-0_1") == "pool"
    assert role_of("MainThread") == "main"
    assert role_of("gw-inbox") == "gw-inbox"


def test_a_thread_s_cpu_is_counted_under_its_role_and_kept_after_it_ends() -> None:
    collector = ThreadCpuCollector()
    before = collector.read().get("inject-worker", 0.0)
    go, done = threading.Event(), threading.Event()

    def work() -> None:
        _burn(0.15)
        go.set()
        done.wait(10)

    t = threading.Thread(target=work, name="inject-unit-test")
    t.start()
    assert go.wait(10)
    live = collector.read()["inject-worker"] - before
    assert live >= 0.14  # its own CPU (to the ns, or the kernel's 10 ms tick)
    done.set()
    t.join()
    ended = collector.read().get("inject-worker", 0.0) - before
    assert ended >= live, "a thread that ended still counts: the counter never goes down"


def test_the_family_is_served_by_a_registry() -> None:
    registry = CollectorRegistry()
    register_thread_cpu(registry)
    main = registry.get_sample_value("fleet_thread_cpu_seconds_total", {"thread": "main"})
    assert main is not None and main > 0  # this test process's main thread spent some


def test_python_threads_are_named_in_the_kernel_cut_to_15_bytes() -> None:
    ready, done = threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: (ready.set(), done.wait(10)), name="gw-socket-reader")
    t.start()
    try:
        assert ready.wait(10)
        assert t.native_id is not None
        assert procfs.thread_name(os.getpid(), t.native_id) != "gw-socket-reade"
        process_name = procfs.thread_name(os.getpid(), os.getpid())
        name_os_threads()
        assert procfs.thread_name(os.getpid(), t.native_id) == "gw-socket-reade"
        assert procfs.thread_name(os.getpid(), os.getpid()) == process_name  # ps still says so
    finally:
        done.set()
        t.join()


def test_a_thread_keeps_its_role_while_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python thread that has just ended is no longer listed by ``threading`` but is still in
    /proc for a moment, under the kernel's name it inherited: it keeps the role it was read
    with, so its role's counter does not drop (and then carries it once the id is gone)."""
    from pipeline.observability import thread_cpu

    collector = ThreadCpuCollector()
    go, done = threading.Event(), threading.Event()

    def work() -> None:
        _burn(0.05)
        go.set()
        done.wait(10)

    t = threading.Thread(target=work, name="inject-ending")
    t.start()
    try:
        assert go.wait(10)
        seen = collector.read()["inject-worker"]
        assert seen >= 0.04
        monkeypatch.setattr(thread_cpu, "python_threads", dict)  # threading forgot it
        assert collector.read().get("inject-worker", 0.0) >= seen
    finally:
        done.set()
        t.join()
    assert collector.read().get("inject-worker", 0.0) >= seen
