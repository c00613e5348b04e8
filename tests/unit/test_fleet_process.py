"""pipeline/support/processes.py: the one handle on a ``fleet`` child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.support import procfs
from pipeline.support.processes import FleetProcess, fleet_env, kill_recorded, recorded_pid

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


def _writes_its_pid(pidfile: Path, then: str = "exec sleep 30") -> subprocess.Popen[bytes]:
    """``sh -c 'echo $$ > pidfile; <then>'`` in a session of its own, as a launched worker."""
    proc = subprocess.Popen(["sh", "-c", f"echo $$ > {pidfile}; {then}"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the child never wrote its pid"
        time.sleep(0.01)
    return proc


def test_a_pid_file_names_its_writer_until_it_ends(tmp_path: Path) -> None:
    before = time.time()
    proc = _writes_its_pid(tmp_path / "w.pid")
    started = procfs.started_at(proc.pid)
    assert started is not None and before - 0.1 <= started <= time.time() + 0.1
    assert recorded_pid(tmp_path / "w.pid") == proc.pid
    assert kill_recorded(tmp_path / "w.pid")
    assert proc.wait(10) == -signal.SIGKILL
    assert recorded_pid(tmp_path / "w.pid") is None and procfs.started_at(proc.pid) is None
    assert not kill_recorded(tmp_path / "w.pid")  # gone: nothing to signal
    assert recorded_pid(tmp_path / "none.pid") is None and not kill_recorded(tmp_path / "x.pid")


def test_a_recycled_pid_is_a_stranger_and_is_never_signalled(tmp_path: Path) -> None:
    """CI 2026-12-08: pids wrap, so a pid read from an old file may be another test's
    process. A process started after the file was written is not the one that wrote it."""
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        old = tmp_path / "old.pid"
        old.write_text(f"{stranger.pid}\n")
        written = time.time() - 60  # the worker that wrote it started, and ended, long ago
        os.utime(old, (written, written))
        assert recorded_pid(old) is None
        assert not kill_recorded(old) and not kill_recorded(old, group=True)
        assert stranger.poll() is None  # still running: not signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_a_group_is_ended_after_its_leader_is_gone(tmp_path: Path) -> None:
    """A session leader that exited leaving a child: its group still carries its pid (the
    kernel hands that pid to nobody meanwhile), so the group is signalled."""
    pidfile, child = tmp_path / "g.pid", tmp_path / "child.pid"
    leader = _writes_its_pid(pidfile, then=f"sleep 30 & echo $! > {child}; exit 0")
    assert leader.wait(10) == 0
    deadline = time.monotonic() + 10
    while not (child.exists() and child.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    orphan = int(child.read_text())
    assert recorded_pid(pidfile) is None  # the leader itself is gone
    assert not kill_recorded(pidfile)  # only the group is still there
    assert kill_recorded(pidfile, group=True)
    deadline = time.monotonic() + 10
    while procfs.started_at(orphan) is not None and procfs.proc_stat(orphan).state != "Z":  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the group's child survived"
        time.sleep(0.01)


def test_the_tail_of_the_log_says_why_a_child_exited(tmp_path: Path) -> None:
    """What an error about a child that exited quotes (its log is gone with a CI run)."""
    p = FleetProcess(tmp_path / "m1.log", ["pool", "run", "--no-such-flag"]).start()
    assert p.wait_exit(120) not in (None, 0)
    assert "--no-such-flag" in p.tail() and p.tail(1) == p.output().splitlines()[-1]
    (tmp_path / "long.log").write_text("".join(f"line {i}\n" for i in range(30)))
    assert FleetProcess(tmp_path / "long.log").tail() == "\n".join(
        f"line {i}" for i in range(10, 30)
    )
