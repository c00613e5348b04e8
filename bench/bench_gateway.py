"""Gateway pull and forward paths vs a hand-written loop doing the same work, in one run.

Both sides consume the same pre-produced, signed records from their own copy of an inbox topic,
verify every envelope with the same ``Verifier``, write the held/dedupe (pull) or dedupe +
INJECTED outbox (forward) rows in one SQLite transaction per batch, and commit offsets
synchronously. The ratio ``baseline_s / gateway_s`` is the figure (target >= 0.85).

Then latency (:mod:`bench.latency`): two gateways as processes, 500 msg/s offered through host
A's local socket; an HDR-style histogram (p50, p99, p99.9, max) of send -> held (REPLY into a
main) and send -> INJECTED (brief into a worker, receipt held at the sender), on SQLite and on
PostgreSQL, three runs each. A section that fails reports its error; the others keep their figures.

Run: ``python -m bench gateway`` (``--quick`` for a smaller run). Needs ``KAFKA_BOOTSTRAP`` or
starts a local broker.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import insert

from pipeline.envelope import BoundedSeenSet, Envelope, Kind, Signer, TrustStore, Verifier, encode
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence import StaticPresence
from pipeline.store import make_engine, session_factory
from pipeline.support.clock import now_ms
from pipeline.testing import unique_name

from . import latency
from .broker import kafka


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
    from pipeline.host.held import held_table
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
        now = now_ms()
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
    trust: TrustStore,
    db: Path,
    forward: bool,
    topics: TopicNames,
    to: str,
) -> float:
    """The gateway's own inbox handler (:func:`pipeline.testing.pull_inbox`, built as the
    gateway builds it) in a ``ConsumerRuntime``: ``to`` a pull main, or a worker injected through
    a callback (``forward``)."""
    from pipeline.runtime import ConsumerRuntime, RuntimeConfig
    from pipeline.testing import pull_inbox

    engine = make_engine(f"sqlite:///{db}")
    injected = [0]

    def inject(**_kw: Any) -> None:
        injected[0] += 1

    inbox = pull_inbox(
        engine,
        host="B",
        topics=topics,
        trust=trust,
        mains=() if forward else (to,),
        workers={to: inject} if forward else None,
        senders={"main-a": "A"},
    )
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=unique_name("bench.gw"), topics=(topic,)),
        handler=inbox.handler,
        sessions=session_factory(engine),
        dead_letters=inbox.dead_letters,
    )
    rt.subscribe()
    done = 0
    t0 = time.perf_counter()
    while done < n or (forward and injected[0] < n):
        done += rt.step()
    elapsed = time.perf_counter() - t0
    inbox.close()
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
                db = Path(d) / f"{side}{rep}.sqlite"
                if side == "baseline":
                    verifier = Verifier(
                        host="B",
                        trust=trust,
                        presence=presence,
                        seen=BoundedSeenSet(),
                        topics=topics,
                    )
                    took = _baseline(bootstrap, topic, n, verifier, db, forward, b, topics)
                else:
                    took = _gateway_path(bootstrap, topic, n, trust, db, forward, topics, to)
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


def main(quick: bool = False) -> dict[str, Any]:
    """Every section in turn; a section that fails says why and the others' figures stay."""
    n = 2000 if quick else 10000
    reps, seconds = (1, 4.0) if quick else (3, 10.0)
    sections: dict[str, Any] = {
        "verify": _verify_cost,
        "pull_path": lambda: _throughput(bootstrap, n, forward=False),
        "forward_path": lambda: _throughput(bootstrap, n // 2, forward=True),
        # bench/latency.py: gateways as processes, sends through A's local socket
        "latency_sqlite": lambda: latency.repeats(
            bootstrap, sender="socket", store="sqlite", n=reps, seconds=seconds, rates=(500,)
        ),
        "latency_postgresql": lambda: latency.repeats(
            bootstrap, sender="socket", store="postgresql", n=reps, seconds=seconds, rates=(500,)
        ),
    }
    out: dict[str, Any] = {}
    with kafka("bench") as bootstrap:
        for name, section in sections.items():
            try:
                out[name] = section()
            except Exception as exc:  # noqa: BLE001 - keep what was measured, say what failed
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out["note"] = "ratio_baseline_over_gateway >= 0.85 means within 15% of the hand loop"
        return out
