"""The two hosts the chaos workload drives: their entities, gateway configs and stores.

Host A runs ``main-a`` (pull) and ``worker-a`` (pull); host B runs ``main-b`` (pull) and
``worker-b`` (inject, through a command that appends ``$FLEET_MSG_ID`` to a file). This module
is what the workload's hosts are: their entities, the settings of their gateway configs (written
by the rig, :mod:`pipeline.testing.rig`, with their keys and shared trust directory), and their
stores (an empty copy of a template migrated once per run).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.presence.roles import Delivery, Role
from pipeline.store import make_engine
from pipeline.testing.rig import Rig

HOSTS = ("A", "B")
SENDER, MAIN_B, WORKER_B = "main-a", "main-b", "worker-b"
ASKER = "worker-a"  # a worker on A that asks main-b (R-CONV-1: a worker asks a main)
GROUP = "crew"  # the broadcast group: worker-a on A, main-b on B (both pull)
MEMBERS = {"A": [ASKER], "B": [MAIN_B]}


def entities(injected_file: Path) -> dict[str, tuple[EntityConfig, ...]]:
    """A's two pull entities; B's pull main and its worker injected through a command."""
    append = InjectorSpec(
        type="command",
        command=("sh", "-c", f"echo $FLEET_MSG_ID >> {injected_file}"),
        timeout_s=5.0,
    )
    return {
        "A": (
            EntityConfig(gid=SENDER, role=Role.MAIN, delivery=Delivery.PULL),
            EntityConfig(gid=ASKER, role=Role.WORKER, delivery=Delivery.PULL, groups=(GROUP,)),
        ),
        "B": (
            EntityConfig(gid=MAIN_B, role=Role.MAIN, delivery=Delivery.PULL, groups=(GROUP,)),
            EntityConfig(gid=WORKER_B, role=Role.WORKER, delivery=Delivery.INJECT, injector=append),
        ),
    }


def write_configs(
    rig: Rig,
    *,
    presence_ttl_s: float,
    inject_deadline_s: float,
    injected_file: Path,
) -> dict[str, Path]:
    """Both hosts' gateway configs, ``<root>/<host>.toml``; A's carries the inject deadline."""
    shared = {"presence_interval_s": 1.0, "presence_ttl_s": presence_ttl_s, "sweep_interval_s": 0.5}
    own = {"A": {"inject_deadline_s": inject_deadline_s}, "B": {}}
    return {
        host: rig.write_config(rig.config(host, hosted, **shared, **own[host]))
        for host, hosted in entities(injected_file).items()
    }


def fresh_store(rig: Rig, host: str, *, tag: int) -> None:
    """``host``'s store: an empty copy of a store migrated to head once per run (the
    template beside the repetitions' directories), not a migration per host and
    repetition - seconds each on a loaded machine. The gateway's start-up schema check
    still runs on it (at head: one query). Written through a symlink a rig put there.
    ``tag`` names this workload's temporary template, should two build it at once."""
    template = rig.root.parent / "store-template.sqlite"
    if not template.exists():
        tmp = rig.root.parent / f"store-template.{tag}.tmp"
        make_engine(f"sqlite:///{tmp}").dispose()
        tmp.replace(template)
    src, dst = sqlite3.connect(template), sqlite3.connect(rig.store_path(host))
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
