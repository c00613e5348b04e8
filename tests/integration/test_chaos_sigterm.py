"""A ``fleet chaos run`` ended by SIGTERM (``timeout``, a CI cancel) stops what it started.

By default SIGTERM ended the command at once, and the gateways it had started kept running
(they had to be killed by hand). The command now turns SIGTERM into the interrupt SIGINT is,
so its ``finally`` blocks run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.chaos.gateway_process import RUNNING_LINE
from pipeline.testing import BrokerHandle

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _started_under(directory: Path) -> list[int]:
    """Pids of processes whose command line names ``directory`` (the run's gateways)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(directory).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue  # gone meanwhile
    return pids


def test_a_chaos_run_ended_by_sigterm_leaves_no_gateway_running(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    err = (tmp_path / "run.err").open("wb")
    run = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "chaos", "run", "--scenario", "kill9-pull",
         "--repeat", "1", "--duration", "120", "--bootstrap", kafka.bootstrap,
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while sum(log.read_text().count(RUNNING_LINE) for log in tmp_path.rglob("*.log")) < 2:
            assert run.poll() is None and time.monotonic() < deadline, (
                tmp_path / "run.err"
            ).read_text()[-3000:]
            time.sleep(0.2)
        gateways = [p for p in _started_under(tmp_path) if p != run.pid]
        assert len(gateways) >= 2, gateways
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=90)
        left = [p for p in _started_under(tmp_path) if p in gateways]
        assert left == [], f"still running after the run ended: {left}"
    finally:
        err.close()
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in _started_under(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
