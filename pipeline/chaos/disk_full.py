"""The store's disk full (store-full): host B's SQLite store on a small tmpfs, filled to
ENOSPC by a ballast file for a while, then emptied again.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LocalCluster

from .nemesis import NemesisContext
from .workload import Workload


@dataclass(frozen=True, kw_only=True)
class SmallDisk:
    mount: Path
    size_mb: int


@contextlib.contextmanager
def small_disk_rig(
    w: Workload, own_cluster: LocalCluster | None, size_mb: int = 24
) -> Iterator[SmallDisk]:
    """Host B's SQLite store on a tmpfs of ``size_mb`` (mounted here; we are root). The store
    path stays ``<root>/B.sqlite``, a symlink SQLite resolves, so its journal lands on the
    small disk too."""
    mount = w.root / "B-disk"
    mount.mkdir(exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "chaos-store", str(mount)], check=True
    )
    try:
        (w.root / "B.sqlite").symlink_to(mount / "B.sqlite")
        yield SmallDisk(mount=mount, size_mb=size_mb)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path) -> int:
    """Write a ballast file until the filesystem says ENOSPC; returns its size in bytes."""
    chunk = b"\0" * (256 * 1024)
    written = 0
    with (mount / "ballast").open("wb", buffering=0) as f:
        try:
            while True:
                written += f.write(chunk) or 0
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return written


def store_full(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    disk: SmallDisk = ctx.rig
    ballast = fill(disk.mount)
    time.sleep(hold)
    (disk.mount / "ballast").unlink()
    return "B store", {"full_s": round(hold, 3), "ballast_bytes": ballast}
