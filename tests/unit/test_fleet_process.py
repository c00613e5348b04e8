"""pipeline/support/processes.py: the one handle on a ``fleet`` child process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.support.processes import FleetProcess, fleet_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")

DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"


def _adopt(tmp_path: Path, code: str) -> FleetProcess:
    """A handle on a plain Python child (the handle's signals, without a fleet start-up)."""
    handle = FleetProcess(tmp_path / "child.log", name="child")
    handle.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert handle.proc.stdout is not None and handle.proc.stdout.readline() == b"up\n"
    handle.proc.stdout.close()
    return handle


def test_each_start_is_an_incarnation_with_its_output_appended_to_the_log(
    tmp_path: Path,
) -> None:
    p = FleetProcess(tmp_path / "help.log", ["--help"])
    assert p.name == "help" and p.pid is None and not p.alive and p.exit_code is None
    for n in (1, 2):
        p.start()
        assert p.wait_exit(120) == 0
        assert p.starts == n and p.printed("Usage: fleet")  # every incarnation wrote it once
    assert not p.printed("no such line")
    assert p.output().count("Usage: fleet") == 2
    assert p.cpu_s() is None  # not running


def test_a_child_runs_this_checkout() -> None:
    root = str(Path(__file__).resolve().parents[2])
    assert fleet_env({"X": "1"})["PYTHONPATH"].split(":")[0] == root
    assert fleet_env({"X": "1"})["X"] == "1"


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    p = _adopt(tmp_path, DEAF)
    assert p.alive and p.cpu_s() is not None
    assert p.stop(timeout=0.5) == -signal.SIGKILL


def test_kill9_and_a_paused_child_still_stops(tmp_path: Path) -> None:
    p = _adopt(tmp_path, "import time; print('up', flush=True); time.sleep(60)")
    p.pause()
    assert p.stop(timeout=30) == -signal.SIGTERM  # SIGCONT first: a paused child hears SIGTERM
    q = _adopt(tmp_path, DEAF)
    q.kill9()
    assert not q.alive and q.exit_code == -signal.SIGKILL
    q.kill9()  # gone: nothing to do
