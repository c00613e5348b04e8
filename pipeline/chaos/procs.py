"""A gateway as a child process the nemesis can kill -9, stop, continue and restart.

``python -m pipeline gateway run --config F``: the code production runs, in its own process, so
a kill -9 is a real crash (no ``finally``, no flush) and a SIGSTOP a real zombie. The one copy:
the integration tests use this class too (``tests/integration/fleet_hosts.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

RUNNING_LINE = "running (inbox"


class GatewayProc:
    def __init__(
        self, config: Path, log: Path, env: dict[str, str] | None = None, *, name: str = ""
    ) -> None:
        self.name = name or config.stem
        # extra environment for the next start, e.g. FLEET_FAULT (pipeline/hooks.py): the
        # nemesis may change it between incarnations
        self.env: dict[str, str] = dict(env or {})
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self) -> list[str]:
        """The ``python -m pipeline`` arguments of the next incarnation (a pool member's
        process overrides it: ``pipeline/chaos/pool_workload.py``)."""
        return ["gateway", "run", "--config", str(self.config)]

    def start(self) -> GatewayProc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", *self.command()],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system, every thread) of the running incarnation, from
        ``/proc``; None when it is not running or the platform has no ``/proc``."""
        if not self.alive:
            return None
        assert self.proc is not None
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def ready(self) -> bool:
        """True once the current incarnation printed its ``running`` line."""
        return self.output().count(RUNNING_LINE) >= self.starts

    def kill9(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """Ask for a clean shutdown (SIGTERM) without waiting: :meth:`stop` then waits, so
        several gateways shut down side by side."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()

    def stop(self, timeout: float = 20.0) -> int | None:
        """A clean shutdown (SIGTERM: the gateway finishes its turn and closes); SIGKILL only
        when it does not exit within ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return self.exit_code
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # a gateway that ignored SIGTERM for `timeout` s: have it write every thread's stack
            # to its log first (faulthandler on SIGUSR2: runs even when a thread holds the GIL)
            self.proc.send_signal(signal.SIGUSR2)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(1.0)
            self.proc.kill()
            return self.proc.wait(5)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process ends within ``timeout``, else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
