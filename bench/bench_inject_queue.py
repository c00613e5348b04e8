"""The forward path's inject queue with its store writes: what the inject journal costs.

One ``InjectionQueue`` on a SQLite file store (the gateway's default), one inject-mode entity:

* ``burst`` -- N tracked briefs submitted at once (a backlog after a restart, a busy sender);
* ``trickle`` -- N tracked briefs one at a time, each waited out (the quiet steady state);
* ``untracked`` -- the same burst with no reply host (a broadcast): no journal row, no receipt,
  the bare inject loop, measured in the same run as the baseline.

Each with a no-op callback injector (the queue's own cost) and with ``cat`` as a command
injector (a cheap real inject). Reported per inject: wall-clock microseconds and the process's
CPU microseconds (all threads), three repeats, min / median / max.

Run: ``python -m bench inject_queue`` (``--quick``: fewer briefs). To compare with an older
version of the queue, run this file as a script with that version first on ``PYTHONPATH``
(``python bench/bench_inject_queue.py``): it uses only the queue's public constructor.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from pipeline.envelope import Envelope, Kind, Signer
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import CallbackInjector, CommandInjector, Injector
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host.outbound import Publisher
from pipeline.kafka.topics import TopicNames
from pipeline.presence.model import Delivery, Role
from pipeline.store import make_engine, session_factory

REPEATS = 3


def _queue(root: Path, injector: Injector) -> tuple[InjectionQueue, Any]:
    engine = make_engine(f"sqlite:///{root / 'B.sqlite'}")
    entities = LocalEntities()
    entities.register(gid="w", role=Role.WORKER, delivery=Delivery.INJECT, injector=injector)
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=GatewayMetrics(CollectorRegistry()),
    )
    return q, engine


def _idle(q: InjectionQueue) -> None:
    while not q.idle():
        time.sleep(0.0005)


def _run(mode: str, injector: Injector, n: int) -> tuple[float, float]:
    """(wall us, cpu us) per inject for one run of ``mode``."""
    with tempfile.TemporaryDirectory(prefix="bench-inject-") as tmp:
        q, engine = _queue(Path(tmp), injector)
        briefs = [
            Envelope.new(kind=Kind.SEND, sender="main-a", to="w", body=b"x" * 200, ttl_s=600)
            for _ in range(n)
        ]
        q.submit("w", briefs[0], reply_host="A")  # warm-up: thread, connection, tables
        _idle(q)
        reply_host = None if mode == "untracked" else "A"
        w0, c0 = time.perf_counter(), time.process_time()
        for b in briefs[1:]:
            q.submit("w", b, reply_host=reply_host)
            if mode == "trickle":
                _idle(q)
        _idle(q)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        q.stop()
        engine.dispose()
    per = max(1, n - 1)
    return wall / per * 1e6, cpu / per * 1e6


def _three(values: list[float]) -> list[float]:
    return [round(min(values), 1), round(statistics.median(values), 1), round(max(values), 1)]


def main(quick: bool) -> dict[str, Any]:
    n = 200 if quick else 1000
    injectors: dict[str, Injector] = {
        "noop": CallbackInjector(lambda **_: None),
        "cat": CommandInjector(["cat"]),
    }
    result: dict[str, Any] = {"briefs": n, "repeats": REPEATS, "unit": "us per inject"}
    for name, injector in injectors.items():
        count = n if name == "noop" else max(50, n // 10)
        for mode in ("untracked", "burst", "trickle"):
            walls, cpus = [], []
            for _ in range(REPEATS):
                wall, cpu = _run(mode, injector, count)
                walls.append(wall)
                cpus.append(cpu)
            result[f"{name}_{mode}_wall_min_med_max"] = _three(walls)
            result[f"{name}_{mode}_cpu_min_med_max"] = _three(cpus)
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main("--quick" in sys.argv), indent=2))
