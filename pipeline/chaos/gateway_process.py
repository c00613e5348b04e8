"""A gateway as a child process the nemesis can kill -9, stop, continue and restart.

``python -m pipeline gateway run --config F``: the code production runs, in its own process, so
a kill -9 is a real crash (no ``finally``, no flush) and a SIGSTOP a real zombie. The one copy:
the integration tests use this class too. The process handle itself is
:class:`pipeline.support.processes.FleetProcess`.
"""

from __future__ import annotations

import signal
from pathlib import Path

from pipeline.support.processes import FleetProcess

RUNNING_LINE = "running (inbox"


class GatewayProc(FleetProcess):
    """``fleet gateway run --config <config>``, restartable; a SIGTERM it ignores for the whole
    of :meth:`stop`'s timeout gets SIGUSR2 first, so its log shows every thread's stack."""

    stack_signal = signal.SIGUSR2

    def __init__(
        self, config: Path, log: Path, env: dict[str, str] | None = None, *, name: str = ""
    ) -> None:
        super().__init__(log, env=env, name=name or config.stem)
        self.config = config

    def command(self) -> list[str]:
        """The ``python -m pipeline`` arguments of the next incarnation (a pool member's
        process overrides it: ``pipeline/chaos/pool_workload.py``)."""
        return ["gateway", "run", "--config", str(self.config)]

    def ready(self) -> bool:
        """True once the current incarnation printed its ``running`` line."""
        return self.printed(RUNNING_LINE)
