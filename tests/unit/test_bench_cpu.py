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
