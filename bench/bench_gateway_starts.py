"""Back-to-back starts of two gateways on fresh topic prefixes.

Before the roster follower waited out transient broker errors, about one start in three died
on ``NOT_LEADER_FOR_PARTITION`` from the just-created roster topic's watermark read. Each round
here: two ``fleet gateway run`` processes (hosts A and B) on a new prefix, up = each host's
client sees the other's entity live; then both stop (SIGTERM). Reports how many came up, how
many stopped on their own (exit code), and the time to up.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.broker import kafka
from pipeline.bootstrap.client import build_client
from pipeline.host.config import load_config
from pipeline.host.entity_config import EntityConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.testing import unique_name
from pipeline.testing.rig import Rig

HOSTS = ("A", "B")
MAINS = {
    h: EntityConfig(gid=f"main-{h.lower()}", role=Role.MAIN, delivery=Delivery.PULL) for h in HOSTS
}


def _round(
    bootstrap: str, root: Path, timeout_s: float
) -> tuple[float | None, list[int | None], str]:
    prefix = unique_name("st").replace(".", "") + "."
    rig = Rig(root=root, bootstrap=bootstrap, prefix=prefix)
    signers = rig.write_keys(HOSTS)
    procs, cfgs = [], {}
    t0 = time.monotonic()
    for h in HOSTS:
        store = f"sqlite:///{root / (prefix + h + '.sqlite')}"
        config = rig.config(
            h, (MAINS[h],), store_url=store, presence_interval_s=1.0, presence_ttl_s=5.0
        )
        cfg = rig.write_config(config)
        cfgs[h] = cfg
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pipeline", "gateway", "run", "--config", str(cfg)],
                stdout=(root / f"{h}.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
    try:
        a = build_client(load_config(cfgs["A"]), signer=signers["A"])
        b = build_client(load_config(cfgs["B"]), signer=signers["B"])
        up: float | None = None
        while time.monotonic() - t0 < timeout_s:
            if any(p.poll() is not None for p in procs):
                break
            if a.knows("main-b") and b.knows("main-a"):
                up = time.monotonic() - t0
                break
            time.sleep(0.05)
        exits = [p.poll() for p in procs]
        tail = "" if up is not None else _tails(root)
        return up, exits, tail
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _tails(root: Path) -> str:
    return "\n".join(
        f"{h}: " + " | ".join((root / f"{h}.log").read_text(errors="replace").splitlines()[-3:])
        for h in ("A", "B")
    )


def main(quick: bool = False) -> dict[str, Any]:
    rounds = 5 if quick else 50
    times: list[float] = []
    died: list[dict[str, Any]] = []
    with kafka("starts") as bootstrap:
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as d:
                up, exits, tail = _round(bootstrap, Path(d), 60.0)
            if up is None:
                died.append({"exit_codes": exits, "log_tails": tail})
            else:
                times.append(up)
    return {
        "starts": rounds,
        "came_up": len(times),
        "did_not_come_up": len(died),
        "failed_rounds": died,
        "time_to_up_s": {
            "min": round(min(times), 2),
            "median": round(statistics.median(times), 2),
            "max": round(max(times), 2),
        }
        if times
        else None,
    }
