"""CPU per brief on the receiving gateway, in process: the whole brief path of gateway B.

What ``bench.latency``'s gateway B spends on a brief, without Kafka and without the relay: the
runtime's ``process`` of an inbox batch (verify, dedupe row, the synchronous offset commit on a
fake consumer), the ``InjectionQueue`` (journal rows committed before the inject), the inject
through the long-lived reference child (``python -m pipeline.gateway.injectors.child``, one
framed brief after another), and the journal close with the signed ``INJECTED`` staged in the
outbox. Built as ``pipeline.bootstrap.gateway`` builds it (metered injector, batch verifier).

Two paces, each on SQLite and on PostgreSQL (``pipeline.testing.start_test_postgres``):

* ``paced`` -- a batch of ``--batch`` briefs, then wait until its receipts are staged (the
  steady state at a moderate rate: every burst is one batch);
* ``flood`` -- every batch handed over at once (a backlog: the queue takes bursts).

CPU per brief = this process (every thread, ``RUSAGE_SELF``) + reaped children
(``RUSAGE_CHILDREN``) + the live injector child (``/proc/<pid>/stat``); for PostgreSQL also the
server's CPU (postmaster and its backends), apart. Three repeats, min / median / max.

Run: ``python -m bench.bench_brief_path`` (``--quick``: fewer briefs; ``--store sqlite``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import text

from bench.cpu import fresh_databases, postmaster_pid, tree_cpu_s
from pipeline.envelope import (
    BatchVerifier,
    BoundedSeenSet,
    Envelope,
    Kind,
    Signer,
    TrustStore,
    Verifier,
    encode,
)
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import InjectMetrics
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host.conversations import Conversations
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.outbound import Publisher
from pipeline.kafka.topics import TopicNames
from pipeline.presence import StaticPresence
from pipeline.presence.model import Delivery, Role
from pipeline.record import Record
from pipeline.runtime import ConsumerRuntime
from pipeline.runtime.config import RuntimeConfig
from pipeline.store import make_engine, read_sessions, serialize_writes, session_factory
from pipeline.support import procfs

REPEATS = 3
WORKER = "worker-b"
CHILD = (sys.executable, "-m", "pipeline.gateway.injectors.child")


class _Consumer:
    """A consumer whose synchronous commit succeeds at once (the broker is not measured)."""

    def commit(self, offsets: Any = None, asynchronous: bool = False) -> Any:
        return offsets

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class _Gateway:
    """Gateway B's inbox side on ``url``: handler, runtime, injection queue, child injector."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        if url.startswith("sqlite"):
            serialize_writes(self.engine, across_processes=True)
        self.signer = Signer.generate("A")
        trust = TrustStore()
        trust.add(self.signer.host, self.signer.key_id, self.signer.public_key_bytes)
        self.topics = TopicNames(prefix=f"bp{uuid.uuid4().hex[:8]}.")
        self.topic = self.topics.inbox("B")
        sessions = session_factory(self.engine)
        seen = BoundedSeenSet()
        verifier = Verifier(
            host="B",
            trust=trust,
            presence=StaticPresence({"main-a": "A", WORKER: "B"}),
            seen=seen,
            topics=self.topics,
        )
        spec = InjectorSpec(type="command", command=CHILD, mode="long-lived")
        config = GatewayConfig(
            host="B",
            bootstrap="unused:0",
            entities=(
                EntityConfig(gid=WORKER, role=Role.WORKER, delivery=Delivery.INJECT, injector=spec),
            ),
        )
        registry = CollectorRegistry()
        self.entities = LocalEntities.from_config(config, metrics=InjectMetrics(registry))
        metrics = GatewayMetrics(registry)
        publisher = Publisher(host="B", signer=Signer.generate("B"), topics=self.topics)
        self.injections = InjectionQueue(
            entities=self.entities, sessions=sessions, publisher=publisher, metrics=metrics
        )
        self.staged = threading.Semaphore(0)
        self.injections.on_receipts = self.staged.release
        self.batch = BatchVerifier(verifier, threads=2)
        handler = InboxHandler(
            host="B",
            verifier=verifier,
            entities=self.entities,
            publisher=publisher,
            conversations=Conversations(sessions),
            injections=self.injections,
            reads=read_sessions(self.engine),
            metrics=metrics,
            seen=seen,
            batch_verifier=self.batch,
        )
        from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink

        self.runtime = ConsumerRuntime(
            RuntimeConfig(bootstrap="unused:0", group_id="bp", topics=(self.topic,)),
            handler=handler,
            sessions=sessions,
            dead_letters=OutboxDeadLetterSink(topics=self.topics, gateway="B"),
            consumer_factory=lambda conf: _Consumer(),
        )
        self.runtime.warm_up()
        self.sessions = sessions
        self.offset = 0

    def records(self, n: int) -> list[Record]:
        now = int(time.time() * 1000)
        out = []
        for _ in range(n):
            env = Envelope.new(
                kind=Kind.SEND, sender="main-a", to=WORKER, body=b"x" * 200, ttl_s=3600
            )
            key, headers, value = encode(env, topic=self.topic, signer=self.signer)
            out.append(
                Record(
                    topic=self.topic,
                    partition=0,
                    offset=self.offset,
                    key=key,
                    value=value,
                    headers=tuple(headers),
                    timestamp_ms=now,
                )
            )
            self.offset += 1
        return out

    def child_pid(self) -> int | None:
        entity = self.entities.get(WORKER)
        injector = getattr(entity.injector, "inner", None) if entity is not None else None
        proc = getattr(injector, "_proc", None)
        return None if proc is None else int(proc.pid)

    def idle(self) -> None:
        while not self.injections.idle():
            time.sleep(0.001)

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            rows = c.execute(
                text("SELECT state, count(*) FROM fleet_inject_journal GROUP BY state")
            ).all()
            outbox = c.execute(text("SELECT count(*) FROM outbox")).scalar_one()
        return {**{str(s): int(n) for s, n in rows}, "outbox": int(outbox)}

    def close(self) -> None:
        self.injections.stop()
        self.batch.close()
        entity = self.entities.get(WORKER)
        injector = getattr(entity.injector, "inner", None) if entity is not None else None
        if injector is not None:
            injector.close()
        self.engine.dispose()


def _cpu(child: int | None, server: int | None) -> tuple[float, float, float]:
    """CPU seconds so far: gateway with its children, the live injector child alone, server."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_s = (procfs.cpu_s(child) or 0.0) if child is not None else 0.0
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + child_s
    return total, child_s, (tree_cpu_s(server) or 0.0) if server is not None else 0.0


def one_run(url: str, *, pace: str, briefs: int, batch: int, server: int | None) -> dict[str, Any]:
    gw = _Gateway(url)
    try:
        warm = [gw.records(batch) for _ in range(50)]
        for b in warm:  # the child starts, statements compile, caches fill
            gw.runtime.process(b)
        gw.idle()
        batches = [gw.records(batch) for _ in range(briefs // batch)]
        n = len(batches) * batch
        child = gw.child_pid()
        while gw.staged.acquire(blocking=False):  # the warm-up's wake-ups
            pass
        c0, k0, s0 = _cpu(child, server)
        w0 = time.perf_counter()
        for b in batches:
            gw.runtime.process(b)
            if pace == "paced":
                gw.staged.acquire()
                gw.idle()
        gw.idle()
        wall = time.perf_counter() - w0
        c1, k1, s1 = _cpu(child, server)
        counts = gw.counts()
        assert gw.child_pid() == child, "the injector child was restarted mid-run"
    finally:
        gw.close()
    expected = n + len(warm) * batch
    assert counts.get("injected") == expected, counts
    assert counts["outbox"] == expected, counts
    return {
        "cpu_us": (c1 - c0) / n * 1e6,
        "child_us": (k1 - k0) / n * 1e6,
        "server_us": (s1 - s0) / n * 1e6,
        "wall_us": wall / n * 1e6,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


def _urls(store: str, pg: Any) -> tuple[Any, int | None]:
    if store == "sqlite":
        root = Path(tempfile.mkdtemp(prefix="bench-brief-"))
        return (lambda: f"sqlite:///{root / f'B-{uuid.uuid4().hex[:8]}.sqlite'}"), None

    return fresh_databases(pg.url, "brief"), postmaster_pid(pg.directory)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument("--pace", choices=("paced", "flood", "both"), default="both")
    ap.add_argument("--batch", type=int, default=2, help="briefs per inbox batch")
    ap.add_argument("--briefs", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--quick", action="store_true", help="500 briefs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    briefs = 500 if args.quick else args.briefs
    stores = ("sqlite", "postgresql") if args.store == "both" else (args.store,)
    paces = ("paced", "flood") if args.pace == "both" else (args.pace,)
    result: dict[str, Any] = {"briefs": briefs, "batch": args.batch, "rows": {}}
    pg = None
    try:
        for store in stores:
            if store == "postgresql":
                from pipeline.testing import start_test_postgres

                pg = start_test_postgres()
            fresh, server = _urls(store, pg)
            for pace in paces:
                runs = [
                    one_run(fresh(), pace=pace, briefs=briefs, batch=args.batch, server=server)
                    for _ in range(args.repeats)
                ]
                row = {k: spread([r[k] for r in runs]) for k in ("cpu_us", "child_us", "wall_us")}
                if server is not None:
                    row["server_us"] = spread([r["server_us"] for r in runs])
                result["rows"][f"{store}/{pace}"] = row
                line = f"{store:10} {pace:6} CPU us/brief (gateway + child) " + "/".join(
                    f"{row['cpu_us'][k]:.0f}" for k in ("min", "median", "max")
                )
                line += f" (child {row['child_us']['median']:.0f})"
                if server is not None:
                    line += "  PostgreSQL server " + "/".join(
                        f"{row['server_us'][k]:.0f}" for k in ("min", "median", "max")
                    )
                line += f"  wall {row['wall_us']['median']:.0f} us/brief"
                print(line, flush=True)
    finally:
        if pg is not None:
            pg.close()
    if args.json:
        print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
