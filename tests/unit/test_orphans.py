"""Ending an interrupted launch's process group, never a stranger's (R-LIFE-5), on real
processes: a group started the launcher's way (its own session)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.control.launcher import Launcher
from pipeline.control.orphans import end_group, group_members, process_token
from pipeline.control.reaper import Reaper
from pipeline.host.entity_config import InjectorSpec, ProfileConfig

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture
def group() -> Iterator[int]:
    """A session leader with a child of its group: a shell and two sleeps."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 60"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(group_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_group_of_ours_is_ended(group: int) -> None:
    token = process_token(group)
    assert token is not None and len(group_members(group)) == 2
    assert end_group(group, token) == f"its process group {group} was ended"
    assert group_members(group) == []  # the leader may linger as our zombie: not counted
    assert end_group(group, token) == f"process group {group} had already ended"


def test_a_recycled_pid_is_never_signalled(group: int) -> None:
    """Same pid, another start: the token differs, so nothing is sent to it."""
    boot, ticks = str(process_token(group)).rsplit(":", 1)
    stranger = f"{boot}:{int(ticks) - 1}"
    assert "is another process now (recycled)" in end_group(group, stranger)
    assert len(group_members(group)) == 2


def test_without_a_pid_or_a_token_nothing_is_signalled(group: int) -> None:
    assert "no process was recorded" in end_group(None, None)
    assert "its start was not recorded" in end_group(group, None)
    assert len(group_members(group)) == 2


def test_a_stop_signals_the_workers_group_but_never_a_recycled_pid(
    group: int, tmp_path: Path
) -> None:
    """The reaper's SIGTERM (a profile without ``stop``) checks the recorded token too."""
    profile = ProfileConfig(name="p", launch=("true",),
                            injector=InjectorSpec(type="command", command=("cat",)))  # fmt: skip
    reaper = Reaper(sessions=None, profiles={"p": profile}, launcher=Launcher(str(tmp_path)),  # type: ignore[arg-type]
                    values=lambda row, p: {}, forget=lambda gid, gone: None,
                    drop_held=lambda s, gid: 0)  # fmt: skip
    token = str(process_token(group))
    boot, ticks = token.rsplit(":", 1)
    row = SimpleNamespace(spawn_id="w-1", profile="p", pid=group, pid_start=f"{boot}:{ticks}0")
    reaper.end_process(row)
    assert len(group_members(group)) == 2, "a recycled pid was signalled"
    reaper.end_process(SimpleNamespace(**{**vars(row), "pid_start": token}))
    deadline = time.monotonic() + 10
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert group_members(group) == []
