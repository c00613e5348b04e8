"""The two hosts the chaos workload drives, and every file it writes for them.

Host A runs ``main-a`` (pull) and ``worker-a`` (pull); host B runs ``main-b`` (pull) and
``worker-b`` (inject, through a command that appends ``$FLEET_MSG_ID`` to a file). This module
is the one place the workload writes per-host configuration: each host's gateway config (TOML),
its signing key and the shared trust directory, and its store (an empty copy of a template
migrated once per run).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pipeline.envelope import Signer
from pipeline.store import make_engine

HOSTS = ("A", "B")
SENDER, MAIN_B, WORKER_B = "main-a", "main-b", "worker-b"
ASKER = "worker-a"  # a worker on A that asks main-b (R-CONV-1: a worker asks a main)
GROUP = "crew"  # the broadcast group: worker-a on A, main-b on B (both pull)
MEMBERS = {"A": [ASKER], "B": [MAIN_B]}


def store_url(root: Path, host: str) -> str:
    return f"sqlite:///{root / (host + '.sqlite')}"


def write_keys(root: Path) -> dict[str, Signer]:
    """Each host's signing key (``<host>.key``) and its public half in ``trusted/``."""
    (root / "trusted").mkdir(exist_ok=True)
    signers = {}
    for h in HOSTS:
        s = Signer.generate(h)
        s.write_private(root / f"{h}.key")
        s.write_public(root / "trusted" / f"{h}.pub")
        signers[h] = s
    return signers


def write_config(
    root: Path,
    host: str,
    entities: str,
    extra: str = "",
    *,
    bootstrap: str,
    prefix: str,
    presence_ttl_s: float,
) -> Path:
    """``<root>/<host>.toml``: the host's gateway config with ``entities`` (TOML tables)."""
    path = root / f"{host}.toml"
    path.write_text(
        f'host = "{host}"\nbootstrap = "{bootstrap}"\nstore_url = "{store_url(root, host)}"\n'
        f'topic_prefix = "{prefix}"\nkey_file = "{root / (host + ".key")}"\n'
        f'trust_dir = "{root / "trusted"}"\npresence_interval_s = 1.0\n'
        f"presence_ttl_s = {presence_ttl_s}\nsweep_interval_s = 0.5\n{extra}\n{entities}\n"
    )
    return path


def write_configs(
    root: Path,
    *,
    bootstrap: str,
    prefix: str,
    presence_ttl_s: float,
    inject_deadline_s: float,
    injected_file: Path,
) -> dict[str, Path]:
    """Both hosts' gateway configs: A's two pull entities, B's pull main and inject worker."""
    a = write_config(
        root,
        "A",
        f'[[entities]]\ngid = "{SENDER}"\nrole = "main"\ndelivery = "pull"\n'
        f'[[entities]]\ngid = "{ASKER}"\nrole = "worker"\ndelivery = "pull"\n'
        f'groups = ["{GROUP}"]\n',
        extra=f"inject_deadline_s = {inject_deadline_s}",
        bootstrap=bootstrap,
        prefix=prefix,
        presence_ttl_s=presence_ttl_s,
    )
    b = write_config(
        root,
        "B",
        f'[[entities]]\ngid = "{MAIN_B}"\nrole = "main"\ndelivery = "pull"\n'
        f'groups = ["{GROUP}"]\n'
        f'[[entities]]\ngid = "{WORKER_B}"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {injected_file}"]\n'
        "timeout_s = 5.0\n",
        bootstrap=bootstrap,
        prefix=prefix,
        presence_ttl_s=presence_ttl_s,
    )
    return {"A": a, "B": b}


def fresh_store(root: Path, host: str, *, tag: int) -> None:
    """``host``'s store: an empty copy of a store migrated to head once per run (the
    template beside the repetitions' directories), not a migration per host and
    repetition - seconds each on a loaded machine. The gateway's start-up schema check
    still runs on it (at head: one query). Written through a symlink a rig put there.
    ``tag`` names this workload's temporary template, should two build it at once."""
    template = root.parent / "store-template.sqlite"
    if not template.exists():
        tmp = root.parent / f"store-template.{tag}.tmp"
        make_engine(f"sqlite:///{tmp}").dispose()
        tmp.replace(template)
    src, dst = sqlite3.connect(template), sqlite3.connect(root / f"{host}.sqlite")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
