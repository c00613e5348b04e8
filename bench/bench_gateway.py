"""Gateway pull and forward paths vs a hand-written loop doing the same work, in one run.

Both sides consume the same pre-produced, signed records from their own copy of an inbox topic,
verify every envelope with the same ``Verifier``, write the held/dedupe (pull) or dedupe +
INJECTED outbox (forward) rows in one SQLite transaction per batch, and commit offsets
synchronously. The ratio ``baseline_s / gateway_s`` is the figure (target >= 0.85).

Then latency: two gateways on loopback, 500 msg/s for a few seconds; p50/p99 of send -> held
(REPLY into a main) and send -> INJECTED (brief into a worker, receipt held at the sender).

Run: ``python -m bench gateway`` (``--quick`` for a smaller run). Needs ``KAFKA_BOOTSTRAP`` or
starts a local broker.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry
from sqlalchemy import insert, select

from pipeline.envelope import BoundedSeenSet, Envelope, Kind, Signer, TrustStore, Verifier, encode
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence import StaticPresence
from pipeline.store import make_engine, session_factory
from pipeline.testing import unique_name


def _broker() -> tuple[str, Any]:
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        return env, None
    from pipeline.testing import start_test_broker

    handle = start_test_broker(name="bench")
    return handle.bootstrap, handle


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, list[Any], bytes]]) -> None:
    p = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    for key, headers, value in records:
        p.produce(topic, key=key, value=value, headers=headers)
        p.poll(0)
    p.flush(60)


def _signed(n: int, *, kind: Kind, to: str, sender: str, topic: str, signer: Signer) -> list[Any]:
    out = []
    for i in range(n):
        env = Envelope.new(
            kind=kind, sender=sender, to=to, body=f"msg {i} ".encode() * 8, ttl_s=3600
        )
        out.append(encode(env, topic=topic, signer=signer))
    return out


def _new_topic(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until it resolves
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    return name


def _baseline(
    bootstrap: str,
    topic: str,
    n: int,
    verifier: Verifier,
    db: Path,
    forward: bool,
    signer: Signer,
    topics: TopicNames,
) -> float:
    """The hand-written loop: consume + verify + SQL (one tx per batch) + sync commit."""
    from pipeline.gateway.held import held_table
    from pipeline.outbox import write as outbox_write
    from pipeline.record_headers import pack_headers
    from pipeline.runtime.dedupe import dedupe_table, seen_ids

    engine = make_engine(f"sqlite:///{db}")
    sessions = session_factory(engine)
    c = Consumer(consumer_config(bootstrap, unique_name("bench.base")))
    c.subscribe([topic])
    done = 0
    t0 = time.perf_counter()
    while done < n:
        msgs = c.consume(500, 0.05)
        if not msgs:
            continue
        now = int(time.time() * 1000)
        held_rows, dedupe_rows, injected = [], [], []
        ids = [dict(m.headers())["msgId"].decode() for m in msgs]
        with sessions() as s:  # the same dedupe lookup the gateway does: redelivery is normal
            seen = seen_ids(s, "base", ids)
        for m in msgs:
            if dict(m.headers())["msgId"].decode() in seen:
                continue
            v = verifier.verify(topic=m.topic(), key=m.key(), headers=m.headers(), value=m.value())
            e = v.envelope
            dedupe_rows.append({"scope": "base", "msg_id": e.msg_id, "seen_at_ms": now})
            if forward:
                injected.append(e)
            else:
                held_rows.append(
                    {
                        "recipient": e.to,
                        "msg_id": e.msg_id,
                        "kind": e.kind.value,
                        "sender": e.sender,
                        "trace_id": e.trace_id,
                        "turn_id": None,
                        "body": e.body,
                        "headers": pack_headers(list(m.headers())),
                        "topic": m.topic(),
                        "ts_ms": e.ts_ms,
                        "expires_at_ms": e.expires_at_ms,
                        "held_at_ms": now,
                    }
                )
        with sessions.begin() as s:
            s.execute(insert(dedupe_table), dedupe_rows)
            if held_rows:
                s.execute(insert(held_table), held_rows)
        c.commit(
            offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in msgs[-1:]],
            asynchronous=False,
        )
        for e in injected:  # inject (a no-op callback), then the INJECTED receipt
            r = Envelope.new(
                kind=Kind.INJECTED, sender="B._gateway", to=e.sender, body=b"r", ttl_s=60
            )
            k, h, val = encode(r, topic=topics.inbox("A"), signer=signer)
            with sessions.begin() as s:
                outbox_write(
                    s, topic=topics.inbox("A"), key=k, value=val, headers=h, branch_key="bench"
                )
        done += len(msgs)
    elapsed = time.perf_counter() - t0
    c.close()
    engine.dispose()
    return elapsed


def _gateway_path(
    bootstrap: str,
    topic: str,
    n: int,
    verifier: Verifier,
    db: Path,
    forward: bool,
    signer: Signer,
    topics: TopicNames,
    to: str,
) -> float:
    from pipeline.gateway.config import Delivery, EntityConfig, GatewayConfig, InjectorSpec, Role
    from pipeline.gateway.conversations import Conversations
    from pipeline.gateway.deadletters import OutboxDeadLetterSink
    from pipeline.gateway.entities import LocalEntities
    from pipeline.gateway.inbound import InboxHandler
    from pipeline.gateway.injection import InjectionQueue
    from pipeline.gateway.metrics import GatewayMetrics
    from pipeline.gateway.outbound import Publisher
    from pipeline.runtime import ConsumerRuntime, RuntimeConfig
    from pipeline.store import read_sessions

    engine = make_engine(f"sqlite:///{db}")
    sessions = session_factory(engine)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    entity = (
        EntityConfig(
            gid=to,
            role=Role.WORKER,
            delivery=Delivery.INJECT,
            injector=InjectorSpec(type="callback", callback=to),
        )
        if forward
        else EntityConfig(gid=to, role=Role.MAIN, delivery=Delivery.PULL)
    )
    cfg = GatewayConfig(host="B", bootstrap=bootstrap, entities=(entity,))
    publisher = Publisher(host="B", signer=signer, topics=topics)
    injected = [0]
    entities = LocalEntities.from_config(
        cfg, callbacks={to: lambda **_kw: injected.__setitem__(0, injected[0] + 1)}
    )
    injections = InjectionQueue(
        entities=entities, sessions=sessions, publisher=publisher, metrics=metrics
    )
    handler = InboxHandler(
        host="B",
        verifier=verifier,
        entities=entities,
        publisher=publisher,
        conversations=Conversations(sessions),
        injections=injections,
        reads=read_sessions(engine),
        metrics=metrics,
        seen=BoundedSeenSet(),
    )
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=unique_name("bench.gw"), topics=(topic,)),
        handler=handler,
        sessions=sessions,
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="B"),
    )
    rt.subscribe()
    done = 0
    t0 = time.perf_counter()
    while done < n or (forward and injected[0] < n):
        done += rt.step()
    elapsed = time.perf_counter() - t0
    injections.stop()
    rt.close()
    engine.dispose()
    return elapsed


def _throughput(bootstrap: str, n: int, forward: bool) -> dict[str, Any]:
    topics = TopicNames(prefix=unique_name("bench").replace(".", "") + ".")
    a, b = Signer.generate("A"), Signer.generate("B")
    trust = TrustStore()
    for s in (a, b):
        trust.add(s.host, s.key_id, s.public_key_bytes)
    inbox = topics.inbox("B")
    to = "worker-b" if forward else "main-b"
    kind = Kind.SEND if forward else Kind.REPLY
    records = _signed(n, kind=kind, to=to, sender="main-a", topic=inbox, signer=a)
    presence = StaticPresence({"main-a": "A", to: "B"})
    results: dict[str, list[float]] = {"baseline": [], "gateway": []}
    topic = _new_topic(bootstrap, inbox)
    _produce(bootstrap, topic, records)
    with tempfile.TemporaryDirectory() as d:
        for rep in range(2):  # alternate sides; keep each side's best run
            for side in ("baseline", "gateway"):
                verifier = Verifier(
                    host="B", trust=trust, presence=presence, seen=BoundedSeenSet(), topics=topics
                )
                db = Path(d) / f"{side}{rep}.sqlite"
                if side == "baseline":
                    took = _baseline(bootstrap, topic, n, verifier, db, forward, b, topics)
                else:
                    took = _gateway_path(bootstrap, topic, n, verifier, db, forward, b, topics, to)
                results[side].append(took)
    base, gw = min(results["baseline"]), min(results["gateway"])
    return {
        "messages": n,
        "baseline_s": round(base, 3),
        "gateway_s": round(gw, 3),
        "baseline_msg_per_s": round(n / base),
        "gateway_msg_per_s": round(n / gw),
        "ratio_baseline_over_gateway": round(base / gw, 3),
    }


def _verify_cost(n: int = 2000) -> dict[str, Any]:
    topics = TopicNames()
    a = Signer.generate("A")
    trust = TrustStore()
    trust.add(a.host, a.key_id, a.public_key_bytes)
    recs = _signed(n, kind=Kind.REPLY, to="m", sender="main-a", topic=topics.inbox("B"), signer=a)
    v = Verifier(
        host="B",
        trust=trust,
        presence=StaticPresence({"main-a": "A"}),
        seen=BoundedSeenSet(),
        topics=topics,
    )
    t0 = time.perf_counter()
    for key, headers, value in recs:
        v.verify(topic=topics.inbox("B"), key=key, headers=headers, value=value)
    per = (time.perf_counter() - t0) / n
    return {
        "verify_us_per_msg": round(per * 1e6, 1),
        "verify_ceiling_msg_per_s_per_core": round(1 / per),
    }


def _latency(
    bootstrap: str, rate: int, seconds: float, store_urls: dict[str, str] | None = None
) -> dict[str, Any]:
    """Two gateways as their own processes (one per host, as deployed), a sender on host A.

    Half the messages are REPLYs into ``main-b`` (send -> held at B), half are briefs into
    ``worker-b`` through a command injector (send -> INJECTED held back at A). Timestamps come
    from the stores: the envelope's ``ts`` (taken in ``send``) and ``held_at_ms`` (taken when the
    receiving gateway decides, just before its transaction and offset commit).
    """
    import subprocess
    import sys

    from pipeline.bootstrap import build_client
    from pipeline.gateway.config import load_config
    from pipeline.gateway.held import held_table
    from pipeline.gateway.receipts import read_receipt

    prefix = unique_name("lat").replace(".", "") + "."
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "trusted").mkdir()
        signers = {h: Signer.generate(h) for h in ("A", "B")}
        for h, s in signers.items():
            s.write_private(root / f"{h}.key")
            s.write_public(root / "trusted" / f"{h}.pub")
        entities = {
            "A": '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n',
            "B": (
                '[[entities]]\ngid = "main-b"\nrole = "main"\ndelivery = "pull"\n'
                '[[entities]]\ngid = "worker-b"\nrole = "worker"\ndelivery = "inject"\n'
                '[entities.injector]\ntype = "command"\ncommand = ["true"]\n'
            ),
        }
        urls = store_urls or {h: f"sqlite:///{root / (h + '.sqlite')}" for h in ("A", "B")}
        procs = []
        for h in ("A", "B"):
            cfg = root / f"{h}.toml"
            cfg.write_text(
                f'host = "{h}"\nbootstrap = "{bootstrap}"\ntopic_prefix = "{prefix}"\n'
                f'store_url = "{urls[h]}"\n'
                f'key_file = "{root / (h + ".key")}"\ntrust_dir = "{root / "trusted"}"\n'
                f"presence_interval_s = 1.0\npresence_ttl_s = 60.0\n{entities[h]}"
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pipeline", "gateway", "run", "--config", str(cfg)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        try:
            cfg_a = load_config(root / "A.toml")
            client = build_client(cfg_a, signer=signers["A"])
            deadline = time.monotonic() + 60
            while not (client.knows("worker-b") and client.knows("main-b")):
                if time.monotonic() > deadline:
                    raise TimeoutError("gateways did not come up")
                time.sleep(0.05)
            time.sleep(2.0)  # both inbox consumers have joined their groups
            total = int(rate * seconds)
            sent_reply: dict[str, int] = {}
            sent_brief: dict[str, int] = {}
            t0 = time.perf_counter()
            for i in range(total):
                target = t0 + i / rate
                while time.perf_counter() < target:
                    time.sleep(0.0002)
                if i % 2 == 0:
                    e = client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"r")
                    sent_reply[e.msg_id] = e.ts_ms
                else:
                    e = client.send(sender="main-a", to="worker-b", body=b"brief")
                    sent_brief[e.msg_id] = e.ts_ms
            achieved = total / (time.perf_counter() - t0)
            engines = {h: make_engine(urls[h], create=False) for h in ("A", "B")}
            held: dict[str, int] = {}
            receipts: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                len(held) < len(sent_reply) or len(receipts) < len(sent_brief)
            ):
                time.sleep(0.5)
                with engines["B"].connect() as c:
                    held = {
                        r.msg_id: r.held_at_ms
                        for r in c.execute(
                            select(held_table.c.msg_id, held_table.c.held_at_ms).where(
                                held_table.c.recipient == "main-b"
                            )
                        )
                    }
                with engines["A"].connect() as c:
                    receipts = {
                        read_receipt("INJECTED", bytes(r.body)).msg_id: r.held_at_ms
                        for r in c.execute(
                            select(held_table.c.body, held_table.c.held_at_ms).where(
                                held_table.c.kind == "INJECTED"
                            )
                        )
                    }
            lat_held = sorted(held[m] - sent_reply[m] for m in held if m in sent_reply)
            lat_inj = sorted(receipts[m] - sent_brief[m] for m in receipts if m in sent_brief)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(20)

    def pct(xs: list[int], q: float) -> float:
        return float(xs[min(len(xs) - 1, int(q * len(xs)))]) if xs else float("nan")

    return {
        "rate_msg_per_s": rate,
        "achieved_send_rate": round(achieved),
        "seconds": seconds,
        "send_to_held_ms": {
            "n": len(lat_held),
            "of": len(sent_reply),
            "p50": pct(lat_held, 0.5),
            "p99": pct(lat_held, 0.99),
        },
        "send_to_injected_ms": {
            "n": len(lat_inj),
            "of": len(sent_brief),
            "p50": pct(lat_inj, 0.5),
            "p99": pct(lat_inj, 0.99),
        },
    }


def main(quick: bool = False) -> dict[str, Any]:
    bootstrap, handle = _broker()
    n = 2000 if quick else 10000
    try:
        return {
            "verify": _verify_cost(),
            "pull_path": _throughput(bootstrap, n, forward=False),
            "forward_path": _throughput(bootstrap, n // 2, forward=True),
            "latency": _latency(bootstrap, 500, 4 if quick else 10),
            "note": "ratio_baseline_over_gateway >= 0.85 means within 15% of the hand loop",
        }
    finally:
        if handle is not None:
            handle.close()
