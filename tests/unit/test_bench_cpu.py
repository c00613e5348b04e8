"""bench/cpu.py: the CPU figures a latency row is read beside come from /proc, per process."""

from __future__ import annotations

import sys
import time

import pytest

from bench.cpu import CpuWindow

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_window_charges_this_process_the_cpu_it_spent() -> None:
    window = CpuWindow({}).start()
    spent0 = time.process_time()
    while time.process_time() - spent0 < 0.3:
        pass
    spent = time.process_time() - spent0
    out = window.stop()
    # the same kernel counters, read two ways: equal to within a few clock ticks
    assert out["bench_cores"] * out["wall_s"] == pytest.approx(spent, abs=0.05)
    assert 0 < out["machine_busy"] <= 1


def test_a_gateway_s_cpu_is_split_by_the_role_of_the_thread_that_spent_it() -> None:
    """A process watched as ``gateway_*`` gets ``<name>_threads_cpu_s`` by thread role: the
    CPU a thread called ``gw-inbox`` spent inside the window is charged to ``gw-inbox``."""
    import os
    import threading

    from pipeline.observability.thread_cpu import name_os_threads

    started, go, burned, done = (threading.Event() for _ in range(4))

    def work() -> None:
        started.set()
        go.wait(10)
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        burned.set()
        done.wait(10)

    t = threading.Thread(target=work, name="gw-inbox")
    t.start()
    try:
        assert started.wait(10)
        name_os_threads()
        window = CpuWindow({}, trees={"gateway_T": os.getpid()}).start()
        go.set()
        assert burned.wait(10)
        out = window.stop()
    finally:
        done.set()
        t.join()
    by_role = out["gateway_T_threads_cpu_s"]
    assert by_role["gw-inbox"] == pytest.approx(0.2, abs=0.05)
    assert by_role["main"] < 0.1  # the main thread waited: not charged with the worker's CPU
