"""Other processes: whether one is alive, and the one handle on a ``fleet`` child process.

A ``fleet`` child is ``python -m pipeline <args>`` with this checkout first on ``PYTHONPATH``
(the child runs the code its parent runs), output appended to a log file. :class:`FleetProcess`
is the handle the chaos suite (gateways, pool members), the lab (pool members) and the
integration tests start, stop, kill -9, pause and restart; :func:`spawn_fleet` is the bare
start for a child nobody restarts (a producer, a ``--help`` probe, a one-shot command).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

from . import procfs

_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding ``pipeline/``


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (one we may not signal counts: it is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# a process's start read from /proc (ticks, /proc/uptime) against a file's coarse mtime
_START_SLACK_S = 0.1


def _read_pidfile(pidfile: Path) -> tuple[int, float] | None:
    """The pid in ``pidfile`` and when the file was written; None when it cannot be read."""
    try:
        return int(pidfile.read_text().strip()), pidfile.stat().st_mtime
    except (OSError, ValueError):
        return None


def _wrote(pid: int, written: float) -> bool | None:
    """True when ``pid`` names a process started by the time ``written`` (the one that wrote
    the file: two processes never hold one pid at once), False when it names one started
    later (a stranger), None when no process has it."""
    started = procfs.started_at(pid)
    return None if started is None else started <= written + _START_SLACK_S


def recorded_pid(pidfile: Path) -> int | None:
    """The pid a process wrote about itself to ``pidfile`` (``echo $$ > F``), while that very
    process runs; None when the file is missing or unreadable, the process ended, or the pid
    now names a process started after the file was written: the kernel recycled it for a
    stranger. Pids wrap at ``/proc/sys/kernel/pid_max`` (32,768 on these machines; every
    thread takes one; a suite's run takes 20-64 a second here), so a pid read from a file
    older than one turn may be another test's process."""
    read = _read_pidfile(pidfile)
    return read[0] if read is not None and _wrote(*read) else None


def kill_recorded(
    pidfile: Path, sig: signal.Signals = signal.SIGKILL, *, group: bool = False
) -> bool:
    """Send ``sig`` to the process ``pidfile`` names, only while it is the process that wrote
    the file (:func:`recorded_pid`); True when something was signalled.

    With ``group`` the file names a session leader and its whole process group is signalled,
    also once the leader is gone: the kernel hands out no pid still used as a group's id, so
    a group with that id is the leader's own. A pid taken by a stranger is left alone."""
    read = _read_pidfile(pidfile)
    if read is None:
        return False
    ours = _wrote(*read)
    if not (ours or (group and ours is None)):
        return False
    try:
        (os.killpg if group else os.kill)(read[0], sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def fleet_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, with this checkout first on the path."""
    env = dict(os.environ) | dict(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))
    return env


def spawn_fleet(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """``python -m pipeline <args>`` as a child; with ``log``, its output (stdout and stderr)
    is appended to that file, else it goes to ``stdout``/``stderr``."""
    argv = [sys.executable, "-m", "pipeline", *args]
    if log is None:
        return subprocess.Popen(argv, env=fleet_env(env), stdout=stdout, stderr=stderr)
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(argv, env=fleet_env(env), stdout=out, stderr=subprocess.STDOUT)


class FleetProcess:
    """A restartable ``fleet`` child: each :meth:`start` is a new incarnation running
    :meth:`command` (the ``args`` given, unless a subclass says otherwise), its output appended
    to ``log``. ``env`` is read at each start, so a caller may change it between incarnations
    (e.g. ``FLEET_FAULT``, :mod:`pipeline.hooks`)."""

    # sent when a SIGTERM is ignored for the whole of stop()'s timeout, before SIGKILL: a child
    # with faulthandler on it writes every thread's stack to its log (``fleet gateway run``)
    stack_signal: signal.Signals | None = None

    def __init__(
        self,
        log: Path,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        name: str = "",
    ) -> None:
        self.log = log
        self.args = list(args)
        self.env: dict[str, str] = dict(env or {})
        self.name = name or log.stem
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self) -> list[str]:
        """The ``python -m pipeline`` arguments of the next incarnation."""
        return list(self.args)

    def start(self) -> Self:
        self.proc = spawn_fleet(self.command(), env=self.env, log=self.log)
        self.starts += 1
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system, every thread) of the running incarnation; None when it
        is not running or the platform has no ``/proc``."""
        if self.proc is None or not self.alive:
            return None
        return procfs.cpu_s(self.proc.pid)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 20) -> str:
        """The log's last ``lines`` lines: why a child that exited did, for an error message
        read where its log file is gone (a CI run's temporary folder)."""
        return "\n".join(self.output().splitlines()[-lines:])

    def printed(self, line: str) -> bool:
        """True once the current incarnation wrote ``line`` to the log (every earlier one
        wrote it once)."""
        return self.output().count(line) >= self.starts

    def send(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill9(self, wait_s: float = 10.0) -> None:
        """SIGKILL, a real crash (no ``finally``, no flush); returns once it is gone."""
        if self.proc is not None and self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(wait_s)

    def pause(self) -> None:
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        self.send(signal.SIGCONT)

    def terminate(self) -> None:
        """Ask for a clean shutdown (SIGTERM, resuming a paused child first) without waiting:
        :meth:`stop` then waits, so several children shut down side by side."""
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)

    def stop(self, timeout: float = 20.0) -> int | None:
        """A clean shutdown (SIGTERM: the child finishes its turn and closes) and its exit code;
        SIGKILL only when it does not exit within ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return self.exit_code
        self.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if self.stack_signal is not None:
                self.proc.send_signal(self.stack_signal)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return self.proc.wait(1.0)
            self.proc.kill()
            return self.proc.wait(10)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process ends within ``timeout``, else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
