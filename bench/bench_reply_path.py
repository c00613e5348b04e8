"""CPU per REPLY on the receiving gateway, in process: gateway B's REPLY path without Kafka.

What ``bench.latency``'s gateway B spends on a held REPLY, minus the consume itself and the
threads around it (relay, maintenance, presence): the runtime's ``process`` of an inbox batch --
the batch verify (``BatchVerifier`` as the gateway builds it), the dedupe claim, the held row,
one transaction, the asynchronous offset commit on a fake consumer -- and, beside it, the verify
alone on records like them (the floor's crypto part, measured the same way).

CPU is this thread's (``time.thread_time``; a batch this small is verified inline), per REPLY.
Three repeats, min / median / max. Compare two trees by running each in turn (alternate them on
a shared machine): ``PYTHONPATH=<tree> python -m bench.bench_reply_path``.

``--steady``: the same path on a store already holding ``PREFILL`` dedupe claims and held rows
(:func:`steady_store`), with msgIds as ``Envelope.new`` mints them (version 7, time-ordered) and,
alternated in the same run, random ones (version 4, as before): what random ids cost a store some
way into its retention horizon, where every claim and held row lands in a random index leaf.
``--steady --postgresql``: the same on a PostgreSQL server of its own, with the server's CPU and
the WAL it wrote per REPLY beside.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from pipeline.control.requests import SPAWN, STOP
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
from pipeline.envelope.model import new_id, new_msg_id
from pipeline.envelope.reasons import GATEWAY_SUFFIX
from pipeline.envelope.receipts import injected_body
from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import InjectMetrics
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host import deadlines
from pipeline.host.conversations import Conversations
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.host.outbound import Publisher
from pipeline.host.tracking import FORWARD
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.headers import FoldHeaders
from pipeline.presence import StaticPresence
from pipeline.presence.model import Delivery, Role
from pipeline.record import Record
from pipeline.runtime import ConsumerRuntime
from pipeline.runtime.config import RuntimeConfig
from pipeline.runtime.dedupe import dedupe_table
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.store import make_engine, read_sessions, serialize_writes, session_factory

from .cpu import fresh_databases, postmaster_pid, tree_cpu_s
from .latency import spread

REPEATS = 3
MAIN = "main-b"
PREFILL = 500_000  # rows a steady store holds: 17 minutes of REPLYs at 500 msg/s


class _Consumer:
    """A consumer whose commits succeed at once (the broker is not measured)."""

    def commit(self, offsets: Any = None, asynchronous: bool = False) -> Any:
        return offsets

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def one_run(
    url: str,
    *,
    replies: int,
    batch: int,
    receipts: bool = False,
    prefill: int = 0,
    random_ids: bool = False,
    server: int | None = None,
) -> dict[str, float]:
    """B taking REPLYs from main-a; or (``receipts``) A taking B's ``INJECTED`` receipts, each
    about a tracked forward send of main-a's (its row written pending before the clock starts),
    so the batch also reads and settles the tracked rows.

    ``prefill``: the store already holds that many dedupe claims and drained held rows (a store
    some hours into its retention horizon), their msgIds minted one a millisecond up to now.
    ``random_ids``: every msgId, the pre-filled ones and the REPLYs', a random (version-4) one,
    as before msgIds were time-ordered; else as ``Envelope.new`` mints them.
    ``server``: the PostgreSQL postmaster's pid; its CPU (and its backends') over the timed
    batches per REPLY is ``server_us``, and the WAL it wrote meanwhile ``wal_bytes`` per REPLY
    (a ``CHECKPOINT`` after the pre-fill: every run starts where the first change of a page
    writes the whole page)."""
    engine = serialize_writes(make_engine(url))
    here, peer = ("A", "B") if receipts else ("B", "A")
    main, sender = ("main-a", f"B{GATEWAY_SUFFIX}") if receipts else (MAIN, "main-a")
    signer = Signer.generate(peer)
    trust = TrustStore()
    trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    topics = TopicNames(prefix=f"rp{uuid.uuid4().hex[:8]}.")
    topic = topics.inbox(here)
    sessions = session_factory(engine)
    seen = BoundedSeenSet()
    verifier = Verifier(
        host=here,
        trust=trust,
        presence=StaticPresence({"main-a": "A", MAIN: "B"}),
        seen=seen,
        topics=topics,
    )
    config = GatewayConfig(
        host=here,
        bootstrap="unused:0",
        entities=(EntityConfig(gid=main, role=Role.MAIN, delivery=Delivery.PULL),),
    )
    registry = CollectorRegistry()
    entities = LocalEntities.from_config(config, metrics=InjectMetrics(registry))
    metrics = GatewayMetrics(registry)
    publisher = Publisher(host=here, signer=Signer.generate(here), topics=topics)
    batch_verifier = BatchVerifier(verifier, threads=2)
    handler = InboxHandler(
        host=here,
        verifier=verifier,
        entities=entities,
        publisher=publisher,
        conversations=Conversations(sessions),
        injections=InjectionQueue(
            entities=entities, sessions=sessions, publisher=publisher, metrics=metrics
        ),
        reads=read_sessions(engine),
        metrics=metrics,
        seen=seen,
        batch_verifier=batch_verifier,
        max_held_per_recipient=10**9,
        tracked=(FORWARD, SPAWN, STOP),
    )
    runtime = ConsumerRuntime(
        RuntimeConfig(bootstrap="unused:0", group_id="rp", topics=(topic,)),
        handler=handler,
        sessions=sessions,
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="B"),
        metrics=RuntimeMetrics(registry),
        consumer_factory=lambda conf: _Consumer(),
    )
    runtime.warm_up()
    if prefill:
        _prefill(engine, runtime.config.dedupe_scope, main, prefill, random_ids=random_ids)
    if server is not None:
        with engine.connect() as conn:
            conn.exec_driver_sql("CHECKPOINT")
    offset = 0
    fold = FoldHeaders()  # the relay's headers, on every record an inbox reads

    def records(n: int) -> list[Record]:
        nonlocal offset
        now, out = int(time.time() * 1000), []
        for _ in range(n):
            if receipts:
                about = uuid.uuid4().hex
                with sessions.begin() as s:
                    deadlines.track(s, FORWARD, msg_id=about, sender=main, recipient="w-b",
                                    trace_id="t", sent_ms=now, deadline_ms=now + 3_600_000)  # fmt: skip
                kind, body = Kind.INJECTED, injected_body(about, "w-b")
            else:
                kind, body = Kind.REPLY, b"x" * 200
            env = Envelope.new(kind=kind, sender=sender, to=main, body=body, ttl_s=3600,
                               msg_id=new_id() if random_ids else None)  # fmt: skip
            key, headers, value = encode(env, topic=topic, signer=signer)
            out.append(
                Record(
                    topic=topic,
                    partition=0,
                    offset=offset,
                    key=key,
                    value=value,
                    headers=(*headers, *fold("default", "bench", offset)),
                    timestamp_ms=now,
                )
            )
            offset += 1
        return out

    try:
        for b in [records(batch) for _ in range(100)]:  # statements compile, caches fill
            runtime.process(b)
        batches = [records(batch) for _ in range(replies // batch)]
        n = len(batches) * batch
        before = _server(engine, server)
        t0 = time.thread_time()
        for b in batches:
            runtime.process(b)
        cpu = time.thread_time() - t0
        after = _server(engine, server)
        alone = [records(batch) for _ in range(replies // batch)]
        t0 = time.thread_time()
        for b in alone:
            batch_verifier.verify_all([(r.topic, r.key, r.headers, r.value) for r in b])
        verify = time.thread_time() - t0
    finally:
        runtime.batch_sessions.close()
        batch_verifier.close()
        engine.dispose()
    out = {"cpu_us": cpu / n * 1e6, "verify_us": verify / n * 1e6}
    if before is not None and after is not None:
        out["server_us"] = (after[0] - before[0]) / n * 1e6
        out["wal_bytes"] = (after[1] - before[1]) / n
    return out


def _server(engine: Any, server: int | None) -> tuple[float, int] | None:
    """The PostgreSQL server's CPU seconds (postmaster and backends) and its WAL position."""
    if server is None:
        return None
    with engine.connect() as conn:
        lsn = conn.exec_driver_sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").scalar()
    return (tree_cpu_s(server) or 0.0), int(lsn)


def _prefill(engine: Any, scope: str, recipient: str, n: int, *, random_ids: bool) -> None:
    """``n`` dedupe claims in ``scope`` and ``n`` drained held rows for ``recipient``, one per
    millisecond up to now, in chunks (as retention would leave them)."""
    now = int(time.time() * 1000)
    chunk = 20_000
    for start in range(0, n, chunk):
        stamps = range(now - n + start, now - n + min(n, start + chunk))
        ids = [new_id() if random_ids else new_msg_id(ms) for ms in stamps]
        with engine.begin() as conn:
            conn.execute(dedupe_table.insert(), [
                {"scope": scope, "msg_id": m, "seen_at_ms": ms} for m, ms in zip(ids, stamps, strict=True)
            ])  # fmt: skip
            conn.execute(held_table.insert(), [
                {"recipient": recipient, "msg_id": m, "kind": "REPLY", "sender": "main-a",
                 "body": b"x" * 200, "ts_ms": ms, "expires_at_ms": ms + 3_600_000,
                 "held_at_ms": ms, "drained_at_ms": ms}
                for m, ms in zip(ids, stamps, strict=True)
            ])  # fmt: skip


def steady_store(
    *,
    prefill: int = PREFILL,
    replies: int = 3000,
    batch: int = 2,
    repeats: int = REPEATS,
    postgresql: bool = False,
) -> dict[str, Any]:
    """B's REPLY path on a store already holding ``prefill`` rows, with msgIds as minted
    (time-ordered) and, alternated in the same run, with random ones: CPU per REPLY of each,
    and random over minted per repeat (``python -m bench hotpath``'s store rows). On
    ``postgresql`` (a server of its own, a fresh database per run) also the server's CPU and
    WAL bytes per REPLY of each."""
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp, _stores(Path(tmp), postgresql) as (fresh, server):
        for i in range(repeats):
            for random_ids in (i % 2 == 1, i % 2 == 0):  # alternate which goes first
                runs[random_ids].append(one_run(fresh(), replies=replies, batch=batch,
                                                prefill=prefill, random_ids=random_ids,
                                                server=server))  # fmt: skip
    out: dict[str, Any] = {"store": "postgresql" if postgresql else "sqlite",
                           "prefill": prefill, "batch": batch}  # fmt: skip
    for key in ("cpu_us", "server_us", "wal_bytes"):
        if key not in runs[False][0]:
            continue
        minted, random_ = [r[key] for r in runs[False]], [r[key] for r in runs[True]]
        name = key.removesuffix("_us").removesuffix("_bytes")
        unit = "us" if key.endswith("_us") else "bytes"
        out[f"minted_{name}_{unit}"] = spread(minted)
        out[f"random_{name}_{unit}"] = spread(random_)
        ratios = [r / m for r, m in zip(random_, minted, strict=True) if m]
        out["random_over_minted" if key == "cpu_us" else f"random_over_minted_{name}"] = (
            spread(ratios) if ratios else None
        )
    return out


@contextlib.contextmanager
def _stores(tmp: Path, postgresql: bool) -> Iterator[tuple[Callable[[], str], int | None]]:
    """A fresh store's URL per call, and the server's pid (None on SQLite)."""
    if not postgresql:
        yield (lambda: f"sqlite:///{tmp / f's{uuid.uuid4().hex[:8]}.sqlite'}"), None
        return
    from pipeline.testing import start_test_postgres

    pg = start_test_postgres()
    try:
        yield fresh_databases(pg.url, "steady"), postmaster_pid(pg.directory)
    finally:
        pg.close()


def main(argv: list[str] | bool | None = None) -> dict[str, Any]:
    """``python -m bench.bench_reply_path [options]``; ``python -m bench reply_path [--quick]``
    calls it with ``quick`` (a bool) instead of the options."""
    if isinstance(argv, bool):
        argv = ["--replies", "1000"] if argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2, help="REPLYs per inbox batch")
    ap.add_argument("--replies", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--receipts",
        action="store_true",
        help="gateway A's INJECTED receipts (read + settle their tracked sends), not B's REPLYs",
    )
    ap.add_argument(
        "--steady",
        type=int,
        nargs="?",
        const=PREFILL,
        default=None,
        metavar="ROWS",
        help=f"on a store already holding ROWS rows (default {PREFILL:,}): minted vs random ids",
    )
    ap.add_argument(
        "--postgresql",
        action="store_true",
        help="with --steady: on PostgreSQL (a server of its own), its CPU and WAL beside",
    )
    args = ap.parse_args(argv)
    if args.steady is not None:
        steady = steady_store(prefill=args.steady, replies=args.replies, batch=args.batch,
                              repeats=args.repeats, postgresql=args.postgresql)  # fmt: skip
        for name, unit in (("cpu", "us"), ("server", "us"), ("wal", "bytes")):
            m, r = steady.get(f"minted_{name}_{unit}"), steady.get(f"random_{name}_{unit}")
            x = steady.get("random_over_minted" if name == "cpu" else f"random_over_minted_{name}")
            if m is None or r is None or x is None:
                continue
            print(f"{steady['store']} REPLY path, {name} {unit}/REPLY on a store of "
                  f"{args.steady:,} rows (batch {args.batch}): minted ids "
                  f"{m['min']:.0f}/{m['median']:.0f}/{m['max']:.0f}, random ids "
                  f"{r['min']:.0f}/{r['median']:.0f}/{r['max']:.0f}, random / minted "
                  f"{x['min']:.2f}/{x['median']:.2f}/{x['max']:.2f}", flush=True)  # fmt: skip
        if args.json:
            print(json.dumps(steady, indent=2))
        return steady
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            one_run(
                f"sqlite:///{Path(tmp) / f'b{i}.sqlite'}",
                replies=args.replies,
                batch=args.batch,
                receipts=args.receipts,
            )
            for i in range(args.repeats)
        ]
    result: dict[str, Any] = {
        "batch": args.batch,
        "replies": args.replies,
        "receipts": args.receipts,
    }
    for k in ("cpu_us", "verify_us"):
        result[k] = spread([r[k] for r in runs])
    print(
        "SQLite {what} path CPU us/{what} (batch {b}): {c[min]:.0f}/{c[median]:.0f}/{c[max]:.0f}"
        "  of which verify alone {v[median]:.0f}".format(
            what="INJECTED" if args.receipts else "REPLY",
            b=args.batch,
            c=result["cpu_us"],
            v=result["verify_us"],
        ),
        flush=True,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
