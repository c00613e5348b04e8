"""Start a worker from its profile: the launch argv template, filled, as a detached process."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pipeline.host.entity_config import InjectorSpec, ProfileConfig
from pipeline.support.processes import pid_alive


def fill(template: tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """Placeholders were checked at config load (only PLACEHOLDERS), so format_map is total."""
    return tuple(part.format_map(values) for part in template)


def worker_injector(spec: InjectorSpec, values: Mapping[str, str]) -> InjectorSpec:
    pane = None if spec.pane is None else spec.pane.format_map(values)
    return dataclasses.replace(spec, command=fill(spec.command, values), pane=pane)


class Launcher:
    """Runs ``profile.launch`` in its own session (it outlives a gateway restart); the brief is
    written to ``{brief_file}`` first. Returns the pid; ``OSError`` when it cannot start."""

    def __init__(self, brief_dir: str | None = None) -> None:
        self.brief_dir = Path(brief_dir or tempfile.gettempdir())
        self.pids: dict[str, int] = {}

    def brief_file(self, gid: str) -> str:
        return str(self.brief_dir / f"fleet-brief-{gid}.txt")

    def launch(self, profile: ProfileConfig, values: Mapping[str, str], brief: str | None) -> int:
        Path(values["brief_file"]).write_text(brief or "", encoding="utf-8")
        devnull = [
            (os.POSIX_SPAWN_OPEN, fd, os.devnull, flags, 0)
            for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))
        ]
        argv = fill(profile.launch, values)
        # posix_spawn with setsid: the worker leads its own session and outlives a gateway
        # restart; no Popen object, so nothing warns about a child we deliberately leave running
        pid = os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=devnull, setsid=True)
        self.pids[values["gid"]] = pid
        return pid

    def running(self, gid: str, pid: int | None) -> bool:
        """Whether the worker's launch process still runs: our child is asked with ``waitpid``
        (which also collects it), any other pid (a worker launched before a gateway restart)
        with signal 0. No pid known: counted running."""
        if pid is None:
            return True
        if self.pids.get(gid) == pid:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if not done:
                return True
            del self.pids[gid]
            return False
        return pid_alive(pid)

    def reap(self) -> None:
        """Collect exited children (no zombies left behind by short-lived launchers)."""
        for gid, pid in list(self.pids.items()):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                del self.pids[gid]
