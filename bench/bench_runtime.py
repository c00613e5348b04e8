"""The consume runtime vs a hand-written loop and vs faststream, on the same work, in one run.

Work (the hot-path table's row): N records of 1 KiB over 12 partitions, unsigned; per batch one SQLite
transaction that dedupes each ``msgId`` (a unique row) and writes an effect row, then the offset
commit (commit after processing). Three contenders, each its own consumer group on the same topic:

* ``hand``: confluent-kafka ``consume(500)`` + sqlite3 ``INSERT OR IGNORE`` + synchronous commit —
  the least a careful person would write; ``hand_async``: the same loop committing asynchronously,
  which is what the two contenders below do (the runtime's pull path: this handler stages no
  at-most-once effect; faststream's ``AckPolicy.ACK`` calls ``consumer.commit()``, asynchronous),
  so ``runtime_over_hand_async`` is the like-for-like ratio;
* ``runtime``: :class:`pipeline.runtime.ConsumerRuntime` with a handler that stages the effect row
  (the runtime writes the dedupe rows and commits);
* ``faststream``: faststream's batch subscriber with ``AckPolicy.ACK`` (``faststream_worker.py``)
  in a virtualenv this bench makes under ``bench/.venvs/`` — never a project dependency.

Each contender's clock starts at its first record (after its group join) and stops at its N-th.
Figures are ratios within one repeat: ``runtime_over_hand`` = hand_s / runtime_s (target ≥ 0.85)
and ``runtime_over_faststream`` = faststream_s / runtime_s, wall clock, whose target is 0.9 x its
ceiling ``faststream_over_hand_async`` (so ``runtime_over_hand_async`` ≥ 0.9); the same
ratios of CPU seconds (``*_cpu``: every thread of the contender's process, from its first record
to its N-th) are printed beside them, since the wall clock of a shared machine moves with its
other tenants. Then the signed pull path (the gateway's ``InboxHandler`` in the runtime, N/5
signed records to 24 pull mains): msg/s and CPU µs per message with verification on the consume
thread (1) and across 2 threads (``BatchVerifier``), target ≥ 1.2x Ed25519 verify alone on one
core measured in the same repeat (``signed_pull_2threads_over_verify_alone``), and the same path with
the records MAC'd in the pairwise mode (``mac_*``, docs/envelope.md). Three repeats, reported
as min / median / max. ``python -m bench runtime`` (``--quick``: 10k records, 1 repeat);
``python -m bench pull`` runs the pull rows alone.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table

from bench.broker import kafka
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.record import Record
from pipeline.runtime import ConsumerRuntime, RuntimeConfig
from pipeline.runtime.outcomes import ACK, Outcome
from pipeline.runtime.staging import Staged
from pipeline.store import make_engine, metadata, session_factory
from pipeline.testing import unique_name

PARTITIONS = 12
BODY = b"x" * 1024
HERE = Path(__file__).parent
VENV = HERE / ".venvs" / "faststream"

_effects = Table(
    "bench_effect",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("msg_id", String(64)),
    Column("body", LargeBinary),
)


class _Clock:
    """Wall and CPU seconds (this process, every thread) from ``start`` to ``stop``. CPU time is
    printed beside the wall-clock ratios: it is far less moved by the other tenants of a shared
    machine than the wall clock is."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def start(self) -> None:
        if not self.wall:
            self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _fill(bootstrap: str, name: str, records: Iterator[tuple[bytes, Any, bytes]]) -> str:
    """Create ``name`` with PARTITIONS partitions and produce ``(key, headers, value)``s."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[
        name
    ].result(30)
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    for i, (key, headers, value) in enumerate(records):
        producer.produce(name, key=key, value=value, headers=headers)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    return name


def _topic(bootstrap: str, n: int) -> str:
    return _fill(
        bootstrap,
        unique_name("bench.runtime"),
        ((f"k{i % 64}".encode(), [("msgId", f"m{i}".encode())], BODY) for i in range(n)),
    )


def _hand(
    bootstrap: str, topic: str, n: int, db: Path, *, asynchronous: bool = False
) -> tuple[float, float]:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE dedupe (scope TEXT, msg_id TEXT, PRIMARY KEY (scope, msg_id))")
    conn.execute("CREATE TABLE effect (id INTEGER PRIMARY KEY, msg_id TEXT, body BLOB)")
    consumer = Consumer(consumer_config(bootstrap, unique_name("bench.hand")))
    consumer.subscribe([topic])
    seen, clock = 0, _Clock()
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(500, 0.05) if m.error() is None]
        if not msgs:
            continue
        clock.start()
        conn.execute("BEGIN")
        for m in msgs:
            msg_id = dict(m.headers())["msgId"].decode()
            if conn.execute("INSERT OR IGNORE INTO dedupe VALUES ('b', ?)", (msg_id,)).rowcount:
                conn.execute("INSERT INTO effect (msg_id, body) VALUES (?, ?)", (msg_id, m.value()))
        conn.execute("COMMIT")
        ends = {(m.topic(), m.partition()): m.offset() + 1 for m in msgs}
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()],
            asynchronous=asynchronous,
        )
        seen += len(msgs)
    elapsed = clock.stop()
    consumer.close()
    conn.close()
    return elapsed


class _Effect:
    def __init__(self) -> None:
        self.count = 0
        self.clock = _Clock()  # from the first record handed over: the group join is behind us

    def handle(self, record: Record, tx: Staged) -> Outcome:
        self.clock.start()
        self.count += 1
        tx.insert(_effects, {"msg_id": record.header_str("msgId"), "body": record.value})
        return ACK


class _NoDeadLetters:
    """The bench's records never fail; a dead letter here is a bench bug."""

    def stage(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("bench records never dead-letter")


def _hand_async(bootstrap: str, topic: str, n: int, db: Path) -> tuple[float, float]:
    """The hand loop committing asynchronously, as the runtime's pull path (this bench's handler
    stages no at-most-once effect) and faststream's ``AckPolicy.ACK`` (``consumer.commit()``,
    asynchronous) do: the like-for-like baseline for both."""
    return _hand(bootstrap, topic, n, db, asynchronous=True)


def _runtime(bootstrap: str, topic: str, n: int, db: Path) -> tuple[float, float]:
    engine = make_engine(f"sqlite:///{db}")
    metadata.create_all(engine)
    _effects.create(engine)
    handler = _Effect()
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=unique_name("bench.rt"), topics=(topic,)),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=_NoDeadLetters(),
    )
    elapsed = _drive(rt, handler, n)
    engine.dispose()
    return elapsed


def _drive(rt: ConsumerRuntime, handler: Any, n: int) -> tuple[float, float]:
    """Step ``rt`` until ``handler`` has seen ``n`` records; its clock's wall and CPU seconds."""
    rt.subscribe()
    deadline = time.monotonic() + 600
    while handler.count < n and time.monotonic() < deadline:
        rt.step()
    elapsed: tuple[float, float] = handler.clock.stop()
    rt.close()
    return elapsed


MAINS = 24  # pull recipients spread over the partitions (the record key is the recipient)
VERIFY_THREADS = (1, 2)  # 1: verified on the consume thread (as it once was), 2: a pool
FULL = (50_000, 3)  # records, repeats


def _signed_topic(bootstrap: str, n: int, signer: Any, topics: Any, pair: Any = None) -> str:
    """N REPLYs from A to B's pull mains, signed by A, or MAC'd for the pair A-B (``pair``)."""
    from pipeline.envelope import Envelope, Kind, encode

    name = topics.inbox("B")
    envelopes = (
        Envelope.new(
            kind=Kind.REPLY, sender="main-a", to=f"main-{i % MAINS}", body=BODY, ttl_s=3600
        )
        for i in range(n)
    )
    return _fill(
        bootstrap,
        name,
        (encode(e, topic=name, signer=signer, pair=pair) for e in envelopes),
    )


def pairings(signer: Any, trust: Any, peer_host: str = "B") -> tuple[Any, Any]:
    """(A's pairing, B's pairing): each host's agreement key derived from its host key, the
    peer's as its signed presence would publish it (docs/envelope.md, the pairwise MAC mode)."""
    from pipeline.envelope import AgreementKey, Pairing, PeerKey, Signer
    from pipeline.envelope.pairwise import StaticPeerKeys

    a, b = AgreementKey.from_signer(signer), AgreementKey.from_signer(Signer.generate(peer_host))

    def peer(k: Any) -> Any:
        return PeerKey(
            host=k.host, key_id=k.key_id, public_bytes=k.public_bytes, vouched_by=signer.key_id
        )

    return (
        Pairing(own=a, peers=StaticPeerKeys(peer(b)), trusted=trust.lookup),
        Pairing(own=b, peers=StaticPeerKeys(peer(a)), trusted=trust.lookup),
    )


class _Timed:
    """The gateway's inbox handler, clocked from the first record it is handed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.count, self.clock = inner, 0, _Clock()

    def prepare(self, records: list[Record]) -> None:
        self.clock.start()
        self.inner.prepare(records)

    def verify(self, record: Record) -> Any:
        return self.inner.verify(record)

    def warm(self, session: Any) -> None:
        self.inner.warm(session)

    def handle(self, record: Record, tx: Staged) -> Outcome:
        self.clock.start()
        self.count += 1
        return self.inner.handle(record, tx)  # type: ignore[no-any-return]


def _signed_pull(
    bootstrap: str,
    topic: str,
    n: int,
    db: Path,
    signer: Any,
    topics: Any,
    threads: int,
    pairing: Any = None,
) -> tuple[float, float]:
    """The gateway's pull path in the runtime: verify (``threads`` verifying), held + dedupe
    rows in the batch transaction, offset commit. Seconds from the first record to the N-th.
    With ``pairing`` (B's) the MAC'd records verify in the pairwise mode."""
    from pipeline.testing import pull_inbox

    engine = make_engine(f"sqlite:///{db}")
    inbox = pull_inbox(
        engine,
        host="B",
        topics=topics,
        trust=_trust(signer),
        mains=tuple(f"main-{i}" for i in range(MAINS)),
        senders={"main-a": "A"},
        verify_threads=threads,
        pairing=pairing,
    )
    handler = _Timed(inbox.handler)
    rt = ConsumerRuntime(
        RuntimeConfig(bootstrap=bootstrap, group_id=unique_name("bench.pull"), topics=(topic,)),
        handler=handler,
        sessions=session_factory(engine),
        dead_letters=inbox.dead_letters,
    )
    elapsed = _drive(rt, handler, n)
    inbox.close()
    engine.dispose()
    return elapsed


def _faststream_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "faststream[confluent]"], check=True
        )
    return python


def _faststream(bootstrap: str, topic: str, n: int, db: Path) -> tuple[float, float]:
    out = subprocess.run(
        [
            str(_faststream_python()),
            str(HERE / "faststream_worker.py"),
            bootstrap,
            topic,
            unique_name("bench.fs"),
            str(db),
            str(n),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), float(result["cpu_seconds"])


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def _trust(signer: Any) -> Any:
    from pipeline.envelope import TrustStore

    trust = TrustStore()
    trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    return trust


def _signed(bootstrap: str, n: int, tmp: str, r: int) -> dict[str, float]:
    """The pull path, msg/s and CPU µs/msg, verification on the consume thread (1) and on 2
    threads: Ed25519-signed records (``signed_*``) and pairwise-MAC'd ones (``mac_*``), each
    its own topic filled before either is read; ``mac_over_signed_*`` = signed_s / mac_s."""
    from pipeline.envelope import Signer
    from pipeline.kafka.topics import TopicNames

    signer = Signer.generate("A")
    sender, receiver = pairings(signer, _trust(signer))
    sources = {}
    for mode, pair, pairing in (("signed", None, None), ("mac", sender.seal("B"), receiver)):
        topics = TopicNames(prefix=unique_name("bench").replace(".", "") + ".")
        sources[mode] = (_signed_topic(bootstrap, n, signer, topics, pair), topics, pairing)
    out: dict[str, float] = {}
    wall: dict[tuple[str, int], float] = {}
    for t in VERIFY_THREADS:  # interleaved, so a change in the machine's load hits both modes
        for mode, (topic, topics, pairing) in sources.items():
            db = Path(tmp) / f"{mode}{t}_{r}.sqlite"
            secs = _signed_pull(bootstrap, topic, n, db, signer, topics, t, pairing)
            wall[mode, t] = secs[0]
            out[f"{mode}_pull_{t}thread{'s' if t > 1 else ''}_msg_per_s"] = round(n / secs[0])
            out[f"{mode}_pull_{t}thread{'s' if t > 1 else ''}_cpu_us_per_msg"] = round(
                secs[1] / n * 1e6, 1
            )
    alone = _verify_alone_per_s()
    sodium = _verify_alone_per_s(library="libsodium")
    openssl = _verify_alone_per_s(library="openssl")
    out["ed25519_verify_alone_1core_per_s"] = round(alone)
    out["libsodium_ed25519_verify_alone_1core_per_s"] = round(sodium)
    out["openssl_ed25519_verify_alone_1core_per_s"] = round(openssl)
    if "signed_pull_2threads_msg_per_s" in out:
        pulled = out["signed_pull_2threads_msg_per_s"]
        out["signed_pull_2threads_over_verify_alone"] = round(pulled / alone, 3)
        out["signed_pull_2threads_over_libsodium_verify_alone"] = round(pulled / sodium, 3)
        out["signed_pull_2threads_over_openssl_verify_alone"] = round(pulled / openssl, 3)
    for mode in sources:
        if (mode, 2) in wall:
            out[f"{mode}_pull_2threads_over_1thread"] = wall[mode, 1] / wall[mode, 2]
    for t in VERIFY_THREADS:
        out[f"mac_over_signed_{t}thread{'s' if t > 1 else ''}"] = wall["signed", t] / wall["mac", t]
    return out


def _verify_alone_per_s(n: int = 3000, *, library: str = "fabric") -> float:
    """Ed25519 verify alone on one thread, the library call and nothing else, on a message the
    size of a pulled record's signed bytes: the signed pull's baseline in the same repeat.
    ``library``: ``fabric``, the verifier the fabric uses (``pipeline/envelope/ed25519.py``:
    ed25519-dalek where the native module is built, else libsodium); ``libsodium``, the one
    without the native module; ``openssl``, OpenSSL's through ``cryptography``, the fabric's
    library before 0.13 (the issue's baseline was measured on it)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from pipeline.envelope.ed25519 import LibsodiumVerifyKey, VerifyKey

    key = Ed25519PrivateKey.generate()
    message = BODY + b"h" * 200
    signature = key.sign(message)
    public: Any = key.public_key()
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    if library == "fabric":
        public = VerifyKey(raw)
    elif library == "libsodium":
        public = LibsodiumVerifyKey(raw)
    start = time.perf_counter()
    for _ in range(n):
        public.verify(signature, message)
    return n / (time.perf_counter() - start)


PULL_ROWS = (
    *(
        f"{mode}_pull_{t}_{what}"
        for mode in ("signed", "mac")
        for t in ("1thread", "2threads")
        for what in ("msg_per_s", "cpu_us_per_msg")
    ),
    "signed_pull_2threads_over_1thread",
    "mac_pull_2threads_over_1thread",
    "ed25519_verify_alone_1core_per_s",
    "libsodium_ed25519_verify_alone_1core_per_s",
    "openssl_ed25519_verify_alone_1core_per_s",
    "signed_pull_2threads_over_verify_alone",
    "signed_pull_2threads_over_libsodium_verify_alone",
    "signed_pull_2threads_over_openssl_verify_alone",
    "mac_over_signed_1thread",
    "mac_over_signed_2threads",
)


def main(quick: bool) -> dict[str, Any]:
    n, repeats = (10_000, 1) if quick else FULL
    n_signed = n // 5
    runs: list[dict[str, float]] = []
    with kafka("bench") as bootstrap, tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            topic = _topic(bootstrap, n)
            secs = {
                name: fn(bootstrap, topic, n, Path(tmp) / f"{name}{r}.sqlite")
                for name, fn in (
                    ("hand", _hand),
                    ("hand_async", _hand_async),
                    ("runtime", _runtime),
                    ("faststream", _faststream),
                )
            }
            wall = {k: v[0] for k, v in secs.items()}
            cpu = {k: v[1] for k, v in secs.items()}
            runs.append(
                {
                    **{f"{k}_msg_per_s": round(n / v) for k, v in wall.items()},
                    **{f"{k}_cpu_us_per_msg": round(v / n * 1e6, 1) for k, v in cpu.items()},
                    "runtime_over_hand": wall["hand"] / wall["runtime"],
                    "runtime_over_hand_async": wall["hand_async"] / wall["runtime"],
                    "runtime_over_faststream": wall["faststream"] / wall["runtime"],
                    # the ceiling of the row above: a runtime exactly as fast as the
                    # hand loop committing asynchronously (what faststream's ACK does)
                    "faststream_over_hand_async": wall["faststream"] / wall["hand_async"],
                    "runtime_over_hand_cpu": cpu["hand"] / cpu["runtime"],
                    "runtime_over_hand_async_cpu": cpu["hand_async"] / cpu["runtime"],
                    "runtime_over_faststream_cpu": cpu["faststream"] / cpu["runtime"],
                    **_signed(bootstrap, n_signed, tmp, r),
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    return {
        "records": n,
        "partitions": PARTITIONS,
        "runs": runs,
        **{
            k: _spread([r[k] for r in runs])
            for k in (
                "runtime_over_hand",
                "runtime_over_hand_async",
                "runtime_over_faststream",
                "faststream_over_hand_async",
                "runtime_over_hand_cpu",
                "runtime_over_hand_async_cpu",
                "runtime_over_faststream_cpu",
                *PULL_ROWS,
            )
            if k in runs[0]
        },
        "signed_pull_records": n_signed,
        "targets": {
            "runtime_over_hand": 0.85,
            "runtime_over_hand_async": 0.9,
            "signed_pull_2threads_over_verify_alone": 1.2,
            "mac_pull_2threads_msg_per_s": 10_000,
        },
    }
