"""One client cut off from the cluster (cut-off): host B reaches its broker only through
a TCP proxy on a listener of its own, and the fault cuts the proxy while A and the broker carry
on. Why a listener of its own (clients reconnect to the advertised address) is in
``docs/chaos.md``.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.kafka.local.ports import free_ports

from .nemesis import NemesisContext
from .proxy import CutProxy, running
from .workload import Workload

CUT_LISTENER = "CUT"


def broker_with_cut_listener(directory: Path) -> LocalCluster:
    """One node with a second listener for the gateway under test, advertised as the proxy."""
    bind, advertised = free_ports(2)
    cfg = LauncherConfig(
        directory=directory, nodes=1, heap_mb=512,
        extra_listeners={CUT_LISTENER: (bind, advertised)},
    )  # fmt: skip
    return LocalCluster(cfg, owned=True).start()


def set_bootstrap(config: Path, bootstrap: str) -> None:
    text = config.read_text()
    config.write_text(re.sub(r'(?m)^bootstrap = ".*"$', f'bootstrap = "{bootstrap}"', text))


@contextlib.contextmanager
def cut_rig(w: Workload, cluster: LocalCluster | None) -> Iterator[CutProxy]:
    assert cluster is not None
    bind, advertised = cluster.config.extra_listeners[CUT_LISTENER]
    set_bootstrap(w.procs["B"].config, f"127.0.0.1:{advertised}")
    with running(advertised, bind) as proxy:
        yield proxy


def cut_off(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    proxy: CutProxy = ctx.rig
    proxy.cut()
    time.sleep(hold)
    proxy.heal()
    return "B", {"cut_s": round(hold, 3), "connections": proxy.connections}
