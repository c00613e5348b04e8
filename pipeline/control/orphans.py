"""Ending the process group of an interrupted launch, never a stranger's (R-LIFE-5).

The launcher starts a worker as a session leader (``setsid``), so its process group id is its
pid. Right after the start, :func:`process_token` records *which* process that pid is: the boot
id and the kernel's start time of the pid (``/proc/<pid>/stat`` field 22). At boot, a spawn left
``launching`` is failed ``LAUNCH_INTERRUPTED`` and :func:`end_group` ends its group only when
it is provably still ours:

* the leader still runs with the recorded token → ours: the group is ended;
* the leader runs with another token → the pid was recycled: nothing is signalled;
* the leader is gone but members of the group remain → ours: the kernel does not hand out a
  pid still used as a process group id, so the group is the one the launch created;
* no token was recorded (no ``/proc``, or a crash between the start and the record) → nothing
  is signalled, and the FAILED says so.

Zombies count as gone (a reparented child may wait for a reaper that never comes).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")
TERM_GRACE_S = 5.0  # SIGTERM first; SIGKILL for what is still there after this


def _boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` fields after the command name (state first); None: no such pid."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def process_token(pid: int) -> str | None:
    """``<boot id>:<start ticks>`` of a running pid; None when it is gone or unknowable."""
    fields, boot = _stat(pid), _boot_id()
    if fields is None or boot is None or fields[0] == "Z":
        return None
    return f"{boot}:{fields[19]}"


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and fields[2] == str(pgid):
                members.append(int(entry.name))
    return members


def end_group(pgid: int | None, token: str | None, *, grace_s: float = TERM_GRACE_S) -> str:
    """End the launch's process group if it is provably ours; returns what happened, in words
    (the FAILED's text)."""
    if pgid is None:
        return "no process was recorded for it (it crashed before the start, or between the start and its record)"
    if token is None:
        return (
            f"process group {pgid} not ended: its start was not recorded, so it cannot be "
            "told from a recycled pid"
        )
    leader = process_token(pgid)
    if leader is not None and leader != token:
        return f"process group {pgid} not ended: pid {pgid} is another process now (recycled)"
    if not group_members(pgid):
        return f"process group {pgid} had already ended"
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        except PermissionError as exc:
            return f"process group {pgid} could not be ended: {exc}"
        deadline = time.monotonic() + grace_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_members(pgid):
            break
    if group_members(pgid):
        return f"process group {pgid} could not be ended (still running after SIGKILL)"
    return f"its process group {pgid} was ended"
