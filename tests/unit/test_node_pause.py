"""A paused node is paused when ``pause`` returns: every thread stopped (CI 2026-12-04, a paused
broker answered a probe sent right after the pause; ``kill`` returns while threads still run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.kafka.local.node import KafkaNode
from pipeline.support.procfs import all_threads_stopped

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SPIN = """
import threading
def spin():
    while True:
        pass
for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()
print("spinning", flush=True)
threading.Event().wait()
"""


def test_pause_returns_once_every_thread_has_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"spinning\n"
        node = object.__new__(KafkaNode)  # the production pause on a process of our own
        node.process, node._pid = proc, proc.pid
        assert not all_threads_stopped(proc.pid)
        for _ in range(50):
            node.pause()
            assert all_threads_stopped(proc.pid)
            node.resume()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert all_threads_stopped(proc.pid)  # gone counts as stopped
