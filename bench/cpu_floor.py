"""What one message's parts cost alone, in µs of CPU: the floor beside the gateways' CPU rows.

* **crypto** -- sign a real envelope (``pipeline.envelope.encode``) and verify it
  (``Verifier.verify``), the body as small as the latency bench's;
* **Kafka** -- one produce and one consume at the same paced rate, each in its own process with
  the fabric's client settings (:func:`bench.kafka_floor.cpu_per_message`);
* **store** -- one row shaped like a held message, inserted raw (DB-API, no SQLAlchemy): one row
  and its commit per transaction, and the same per row in a batch of :data:`BATCH` rows in one
  transaction. SQLite with the gateway's pragmas (WAL, ``synchronous=NORMAL``); PostgreSQL through
  psycopg, the server backend's own CPU read from ``/proc`` beside the client's.

* **pages** -- what this machine charges a process for memory it touches again after a pause:
  CPU µs per 4 KiB page read once more right away, after 2 ms asleep (a gap between two
  messages at 500 msg/s) and after 0.5 s (a maintenance tick). On most hardware the three are
  alike (a cache miss); a host that remaps a sleeping process's pages (shadow paging under a
  nested VM) charges a fault per page, and every thread that wakes for a message pays it for
  the code and data it touches. It is not part of the sums: it is the reason they are large.
* **wake** -- the same question asked of code rather than of one buffer: a unit of interpreter
  work about a gateway run's size (:func:`wake_unit`, ~50 µs at speed) timed the first time
  after 0.5 ms, 2 ms and 10 ms asleep and then at speed (a burst right after it), paired per
  round. The first run's extra CPU is what a thread pays here for waking before it does
  anything of its own; times a gateway's runs per message it is an estimate of the part of its
  CPU per message the host charges for the pauses between messages (``bench_hotpath``).

``sum`` per store adds crypto, produce, consume and the single-row insert (client and server):
what a message would cost if the fabric did nothing but its floor. CPU is read with
``time.process_time`` (this process, every thread) and ``/proc`` (the backend).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.support import procfs

from .cpu import us_per_message

BATCH = 100
TOPIC = "fleet.inbox.b"
_COLUMNS = "recipient, msg_id, kind, sender, body, ts_ms, expires_at_ms, held_at_ms"
_TABLE = (
    "CREATE TABLE held (id {id}, recipient VARCHAR(255) NOT NULL, msg_id VARCHAR(255) NOT NULL,"
    " kind VARCHAR(32) NOT NULL, sender VARCHAR(255) NOT NULL, body {blob} NOT NULL,"
    " ts_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL, held_at_ms BIGINT NOT NULL,"
    " UNIQUE (recipient, msg_id))"
)


def crypto(n: int) -> dict[str, Any]:
    """µs of CPU to sign one envelope and to verify it (one thread)."""
    from pipeline.envelope import (
        BoundedSeenSet,
        Envelope,
        Kind,
        Signer,
        TrustStore,
        Verifier,
        encode,
    )
    from pipeline.presence import StaticPresence

    signer = Signer.generate("a")
    trust = TrustStore()
    trust.add("a", signer.key_id, signer.public_key_bytes)
    verifier = Verifier(host="b", trust=trust, presence=StaticPresence({"main-a": "a"}),
                        seen=BoundedSeenSet())  # fmt: skip
    envelopes = [
        Envelope.new(kind=Kind.SEND, sender="main-a", to="worker-b", body=b"bench", ttl_s=3600)
        for _ in range(n)
    ]
    t0 = time.process_time()
    records = [encode(e, topic=TOPIC, signer=signer) for e in envelopes]
    signed = time.process_time() - t0
    t0 = time.process_time()
    for key, headers, value in records:
        verifier.verify(topic=TOPIC, key=key, headers=headers, value=value)
    verified = time.process_time() - t0
    sign_us, verify_us = us_per_message(signed, n), us_per_message(verified, n)
    return {
        "n": n,
        "sign_us": sign_us,
        "verify_us": verify_us,
        "sign_and_verify_us": round((sign_us or 0) + (verify_us or 0), 1),
    }


def _row(i: int, tag: str) -> tuple[Any, ...]:
    now = int(time.time() * 1000)
    return ("main-b", f"{tag}-{i}", "REPLY", "main-a", b"bench", now, now + 3_600_000, now)


def _timed(insert_one: Any, insert_many: Any, n: int, server: Any = None) -> dict[str, Any]:
    """Client (and server) µs per row: ``n`` single-row transactions, then ``n`` rows in
    batches of :data:`BATCH`."""
    out: dict[str, Any] = {"rows": n, "batch": BATCH}
    tag = uuid.uuid4().hex[:8]
    s0, t0 = server() if server else None, time.process_time()
    for i in range(n):
        insert_one(_row(i, tag))
    c1, s1 = time.process_time(), server() if server else None
    for start in range(0, n, BATCH):
        insert_many([_row(i, tag + "b") for i in range(start, min(n, start + BATCH))])
    c2, s2 = time.process_time(), server() if server else None
    out["single_us"] = us_per_message(c1 - t0, n)
    out["batched_us_per_row"] = us_per_message(c2 - c1, n)
    if s0 is not None and s1 is not None and s2 is not None:
        out["server_single_us"] = us_per_message(s1 - s0, n)
        out["server_batched_us_per_row"] = us_per_message(s2 - s1, n)
    return out


def sqlite_insert(n: int) -> dict[str, Any]:
    """Raw sqlite3, the gateway's pragmas, ``BEGIN IMMEDIATE`` as its writers do."""
    with tempfile.TemporaryDirectory(prefix="fleet-floor-") as folder:
        conn = sqlite3.connect(str(Path(folder) / "floor.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(_TABLE.format(id="INTEGER PRIMARY KEY AUTOINCREMENT", blob="BLOB"))
        sql = f"INSERT INTO held ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

        def one(row: tuple[Any, ...]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(sql, row)
            conn.execute("COMMIT")

        def many(rows: list[tuple[Any, ...]]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, rows)
            conn.execute("COMMIT")

        try:
            return _timed(one, many, n)
        finally:
            conn.close()


def pg_insert(url: str, n: int) -> dict[str, Any]:
    """Raw psycopg 3 on a fresh database: a single row per transaction, then ``executemany``
    per batch (pipelined by psycopg: one round trip per batch, not per row)."""
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    name = f"floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(plain, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    root, _, _db = plain.rpartition("/")
    with psycopg.connect(f"{root}/{name}") as conn:
        conn.execute(_TABLE.format(id="BIGSERIAL PRIMARY KEY", blob="BYTEA"))
        conn.commit()
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        conn.commit()
        sql = f"INSERT INTO held ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"

        def one(row: tuple[Any, ...]) -> None:
            conn.execute(sql, row)
            conn.commit()

        def many(rows: list[tuple[Any, ...]]) -> None:
            with conn.cursor() as cur:
                cur.executemany(sql, rows)
            conn.commit()

        return _timed(one, many, n, server=lambda: procfs.cpu_s(backend))


PAGE = 4096


def page_retouch(pages: int = 2048, repeats: int = 8) -> dict[str, Any]:
    """CPU µs per page to read one byte of each of ``pages`` pages again: at once, after 2 ms
    and after 0.5 s asleep (median of ``repeats``)."""
    buf = bytearray(pages * PAGE)
    for off in range(0, len(buf), PAGE):
        buf[off] = 1  # every page backed before the first pass

    def one_pass() -> float:
        t0 = time.thread_time()
        total = 0
        for off in range(0, len(buf), PAGE):
            total += buf[off]
        assert total == pages
        return (time.thread_time() - t0) * 1e6 / pages

    out: dict[str, Any] = {"pages": pages}
    for label, pause_s in (("hot", 0.0), ("after_2ms", 0.002), ("after_500ms", 0.5)):
        costs = []
        for _ in range(repeats):
            if pause_s:
                time.sleep(pause_s)
            costs.append(one_pass())
        costs.sort()
        out[f"{label}_us_per_page"] = round(costs[len(costs) // 2], 3)
    return out


WAKE_GAPS_S = (0.0005, 0.002, 0.01)  # a busy thread's pause; a gap at 500 msg/s; a quiet one
WAKE_BURST = 24  # units a round: the first after the pause, the last third at speed
_WAKE_DOC = {f"k{i}": ["v" * 20, i, {"x": i * 1.5}] for i in range(40)}


def wake_unit() -> list[str]:
    """About 50 µs of interpreter work at speed on these machines, a gateway run's size: a small
    document encoded and decoded, its keys sorted (C and bytecode, allocation, a dict)."""
    return sorted(json.loads(json.dumps(_WAKE_DOC)))[:3]


def _gap_label(gap_s: float) -> str:
    return f"after_{gap_s * 1e3:g}ms".replace(".", "_")


def wake_tax(
    gaps_s: tuple[float, ...] = WAKE_GAPS_S, rounds: int = 120, burst: int = WAKE_BURST
) -> dict[str, Any]:
    """CPU µs of :func:`wake_unit` run first after sleeping each gap, at speed (the median of
    the last third of a burst right after it), and the first's extra over the same round's
    speed: medians over ``rounds`` (fewer for the long gap). Paired per round, so the other
    tenants' drift hits both sides of a difference alike."""
    out: dict[str, Any] = {}
    for gap in gaps_s:
        firsts, speeds, extras = [], [], []
        for _ in range(rounds if gap < 0.005 else max(1, rounds // 2)):
            time.sleep(gap)
            costs = []
            for _ in range(burst):
                t0 = time.thread_time_ns()
                wake_unit()
                costs.append(time.thread_time_ns() - t0)
            speed = statistics.median(costs[burst * 2 // 3 :])
            firsts.append(costs[0])
            speeds.append(speed)
            extras.append(costs[0] - speed)
        label = _gap_label(gap)
        out[f"{label}_first_us"] = round(statistics.median(firsts) / 1e3, 1)
        out[f"{label}_at_speed_us"] = round(statistics.median(speeds) / 1e3, 1)
        out[f"{label}_extra_us"] = round(statistics.median(extras) / 1e3, 1)
    return out


def floor_sum(
    crypto_us: float | None, kafka: dict[str, Any], insert_us: float | None
) -> float | None:
    """Sign + verify, one produce, one consume and one store insert: ``None`` if a part is
    missing (a sum without one of its parts would read as a floor lower than it is)."""
    parts = [crypto_us, kafka.get("produce_us_per_msg"), kafka.get("consume_us_per_msg"), insert_us]
    if any(p is None for p in parts):
        return None
    return round(sum(parts), 1)  # type: ignore[arg-type]


def path_floors(
    crypto: dict[str, Any], kafka: dict[str, Any], insert_us: float | None
) -> dict[str, float | None]:
    """Each gateway's share of the floor per message kind, from the parts: what the gateway
    could not do without, one store transaction counted per message it commits.

    - A per REPLY: sign, one produce, one insert. B per REPLY: one consume, verify, one insert.
    - A per brief: the brief's sign, produce and insert, and its ``INJECTED`` receipt's consume,
      verify and insert. B per brief: the brief's consume, verify and insert (the claim), and
      the receipt's sign, produce and insert. The synchronous offset commit and the inject
      itself are left out: a lower bound.
    """
    sign, verify = crypto.get("sign_us"), crypto.get("verify_us")
    produce, consume = kafka.get("produce_us_per_msg"), kafka.get("consume_us_per_msg")

    def total(*parts: float | None) -> float | None:
        return None if any(p is None for p in parts) else round(sum(parts), 1)  # type: ignore[arg-type]

    brief = total(sign, produce, insert_us, consume, verify, insert_us)
    return {
        "A_reply_us": total(sign, produce, insert_us),
        "B_reply_us": total(consume, verify, insert_us),
        "A_brief_us": brief,
        "B_brief_us": brief,
    }


def measure(bootstrap: str, *, rate: int, seconds: float, rows: int) -> dict[str, Any]:
    """Every part, each reporting its own error; the sums where their parts were measured."""
    from . import kafka_floor

    out: dict[str, Any] = {}
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "crypto": lambda: crypto(rows),
        "kafka": lambda: kafka_floor.cpu_per_message(bootstrap, rate=rate, seconds=seconds),
        "sqlite": lambda: sqlite_insert(rows),
        "postgresql": lambda: _with_pg(rows),
        "pages": page_retouch,
        "wake": wake_tax,
    }
    for name, part in parts.items():
        try:
            out[name] = part()
        except Exception as exc:  # noqa: BLE001 - the other parts keep their figures
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    crypto_us = out["crypto"].get("sign_and_verify_us")
    pg = out["postgresql"]
    pg_insert_us = (
        None
        if pg.get("single_us") is None or pg.get("server_single_us") is None
        else pg["single_us"] + pg["server_single_us"]
    )
    out["sum_sqlite_us"] = floor_sum(crypto_us, out["kafka"], out["sqlite"].get("single_us"))
    out["sum_postgresql_us"] = floor_sum(crypto_us, out["kafka"], pg_insert_us)
    out["path_sqlite"] = path_floors(out["crypto"], out["kafka"], out["sqlite"].get("single_us"))
    # on PostgreSQL the gateway's share is the client's: the server is a process of its own
    out["path_postgresql"] = path_floors(out["crypto"], out["kafka"], pg.get("single_us"))
    return out


def _with_pg(rows: int) -> dict[str, Any]:
    from pipeline.testing import start_test_postgres

    pg = start_test_postgres()
    try:
        return pg_insert(pg.url, rows)
    finally:
        pg.close()
