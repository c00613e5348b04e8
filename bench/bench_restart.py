"""Restart fast: SIGTERM of a gateway -> the first message held again by its next run.

Two gateways as processes (``fleet gateway run``, hosts A and B) on a fresh topic prefix; a
sender on A sends a REPLY to ``main-b`` every 20 ms throughout. Each round SIGTERMs B, starts it
again at once and waits for the first REPLY its new run holds (``held_at_ms`` in B's store).
B's entities are *away* meanwhile (docs/presence.md "Away"): no send is refused, and the bench
counts refusals to say so.

Where the time goes, per round (wall clock; the log lines are the gateway's own):

* ``stop``   - SIGTERM -> the process exited (threads joined, away records flushed);
* ``boot``   - spawn -> ``running`` printed (interpreter, imports, config, store check, parts);
* ``roster`` - ``running`` -> ``inbox: roster caught up`` in B's log (the roster read to its end);
* ``inbox``  - caught up -> the first REPLY held (join the group under its static
  ``group.instance.id``: the same partitions, no rebalance; fetch from the committed offset,
  verify, commit);
* ``total``  - SIGTERM -> first held.

Run alone: ``python -m bench bench_restart [--quick]`` (``--quick``: 5 rounds, else 20).
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.broker import kafka
from pipeline.bootstrap.client import build_client
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.envelope import Kind
from pipeline.errors import FleetError
from pipeline.host.config import load_config
from pipeline.host.entity_config import EntityConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.testing import unique_name
from pipeline.testing.rig import Rig

HOSTS = ("A", "B")
CAUGHT_UP = "inbox: roster caught up"
SEND_EVERY_S = 0.02


def _log_time(line: str) -> float:
    """Wall seconds of a logging line (``%(asctime)s``: local time, millisecond precision)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _first_held_after(store: Path, after_ms: int) -> int | None:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
        row = db.execute(
            "SELECT min(held_at_ms) FROM fleet_held WHERE recipient = 'main-b' AND held_at_ms > ?",
            (after_ms,),
        ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


class _Sender(threading.Thread):
    def __init__(self, config: Path, signer: Any) -> None:
        super().__init__(daemon=True)
        self.client = build_client(load_config(config), signer=signer)
        self.stop = threading.Event()
        self.sent = self.refused = 0

    def run(self) -> None:
        n = 0
        while not self.stop.wait(SEND_EVERY_S):
            try:
                self.client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"%d" % n)
                self.sent += 1
            except FleetError:
                self.refused += 1
            n += 1


def _round(b: GatewayProc, store: Path, timeout_s: float) -> dict[str, float]:
    t_term = time.time()
    code = b.stop()
    t_exit = time.time()
    if code != 0:
        raise RuntimeError(f"B exited {code} on SIGTERM:\n{b.output()[-2000:]}")
    b.start()
    t_spawn = time.time()
    deadline = t_spawn + timeout_s
    t_running = None
    while (held := _first_held_after(store, int(t_exit * 1000))) is None:
        if t_running is None and b.ready():
            t_running = time.time()
        if time.time() > deadline or not b.alive:
            raise RuntimeError(f"no REPLY held by B's new run:\n{b.output()[-2000:]}")
        time.sleep(0.01)
    t_running = t_running or time.time()
    lines = [ln for ln in b.output().splitlines() if CAUGHT_UP in ln]
    t_caught = _log_time(lines[-1]) if len(lines) >= b.starts else t_running
    t_held = held / 1000
    return {
        "stop": t_exit - t_term,
        "boot": t_running - t_spawn,
        "roster": max(0.0, t_caught - t_running),
        "inbox": t_held - max(t_caught, t_running),
        "total": t_held - t_term,
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def run(bootstrap: str, rounds: int, timeout_s: float = 120.0) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="fleet-restart-"))
    rig = Rig(root=root, bootstrap=bootstrap, prefix=unique_name("rs").replace(".", "") + ".")
    signers = rig.write_keys(HOSTS)
    cfgs = {
        h: rig.write_config(
            rig.config(
                h,
                (EntityConfig(gid=f"main-{h.lower()}", role=Role.MAIN, delivery=Delivery.PULL),),
                presence_interval_s=1.0,
                presence_ttl_s=5.0,
            )
        )
        for h in HOSTS
    }
    a = GatewayProc(cfgs["A"], root / "A.log").start()
    b = GatewayProc(cfgs["B"], root / "B.log").start()
    sender = _Sender(cfgs["A"], signers["A"])
    try:
        t0 = time.time()
        while not sender.client.knows("main-b"):
            if time.time() - t0 > timeout_s:
                raise RuntimeError(f"main-b never live at A:\n{b.output()[-2000:]}")
            time.sleep(0.1)
        sender.start()
        while _first_held_after(rig.store_path("B"), 0) is None:
            time.sleep(0.05)
        samples = [_round(b, rig.store_path("B"), timeout_s) for _ in range(rounds)]
    finally:
        sender.stop.set()
        b.stop()
        a.stop()
    return {
        "rounds": rounds,
        "sends": sender.sent,
        "refused": sender.refused,
        "seconds": {k: _summary([s[k] for s in samples]) for k in samples[0]},
        "rounds_s": [{k: round(v, 3) for k, v in s.items()} for s in samples],
        "dir": str(root),
    }


def main(quick: bool) -> dict[str, Any]:
    with kafka("bench-restart") as bootstrap:
        return run(bootstrap, rounds=5 if quick else 20)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(main("--quick" in sys.argv), indent=2))
