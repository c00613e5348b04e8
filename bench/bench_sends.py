"""A gateway's group commit of local sends: CPU per send against a hand-written loop.

``python -m bench sends [--quick]`` (no broker). The gateway's socket writer commits every
waiting send in one transaction (``GatewayClient.send_all``, docs/gateway.md "The local socket");
this measures that call in-process on a SQLite store, groups of 50 REPLYs to a pull main, and in
the same round a hand loop doing the irreducible work of each send with the same libraries:
an envelope built and signed (``Envelope.new`` + ``encode``: Ed25519), the branch's lsn upsert
and the outbox insert on a raw ``sqlite3`` connection, one commit per group. Rounds alternate;
each ratio is within one round ("one sender ... >= 2,000 msg/s").
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.envelope import Envelope, Kind, Signer, encode
from pipeline.gateway.socket_server import parse_send
from pipeline.record_headers import pack_headers
from pipeline.testing import one_host

GROUP = 50
BODY = "x" * 200
TOPIC = "fleet.inbox.B"
_UPSERT = (
    "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned) VALUES (?, ?, 1, 0) "
    "ON CONFLICT (tenant, branch_key) DO UPDATE SET last_lsn = outbox_branch.last_lsn + 1 "
    "RETURNING last_lsn"
)
_INSERT = (
    "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status, "
    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)"
)


def _gateway(directory: Path) -> Any:
    host = one_host(directory)
    return host.client, host.engine


def _gateway_round(client: Any, n: int) -> float:
    requests = [
        parse_send({"sender": "main-a", "to": "main-b", "body": BODY, "kind": "REPLY"})
        for _ in range(n)
    ]
    t0 = time.process_time()
    for i in range(0, n, GROUP):
        client.send_all(requests[i : i + GROUP])
    return time.process_time() - t0


def _hand_round(db: Path, signer: Signer, n: int) -> float:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    branch = "A>main-b@B"
    body = BODY.encode()
    t0 = time.process_time()
    for _ in range(0, n, GROUP):
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(GROUP):
            env = Envelope.new(kind=Kind.REPLY, sender="main-a", to="main-b", body=body,
                               ttl_s=3600)  # fmt: skip
            key, headers, value = encode(env, topic=TOPIC, signer=signer)
            (lsn,) = conn.execute(_UPSERT, ("default", branch)).fetchone()
            conn.execute(_INSERT, ("default", branch, lsn, TOPIC, key, value,
                                   pack_headers(headers), time.time()))  # fmt: skip
        conn.execute("COMMIT")
    spent = time.process_time() - t0
    conn.close()
    return spent


def main(quick: bool) -> dict[str, Any]:
    n = 1000 if quick else 4000
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for r in range(3):
            directory = root / f"r{r}"
            directory.mkdir()
            client, engine = _gateway(directory)
            client.send_all([parse_send({"sender": "main-a", "to": "main-b", "body": ""})])
            gateway_s = _gateway_round(client, n)
            engine.dispose()
            hand_dir = root / f"h{r}"
            hand_dir.mkdir()
            _, hand_engine = _gateway(hand_dir)  # the same schema, migrated the same way
            hand_engine.dispose()
            hand_s = _hand_round(hand_dir / "A.sqlite", Signer.generate("A"), n)
            rounds.append(
                {
                    "gateway_cpu_us_per_send": round(gateway_s / n * 1e6, 1),
                    "hand_cpu_us_per_send": round(hand_s / n * 1e6, 1),
                    "hand_over_gateway": round(hand_s / gateway_s, 3),
                }
            )
    ratios = sorted(r["hand_over_gateway"] for r in rounds)
    return {
        "sends": n,
        "group": GROUP,
        "rounds": rounds,
        "hand_over_gateway_min_median_max": [ratios[0], ratios[1], ratios[2]],
        "gateway_sends_per_cpu_s_median": round(
            1e6 / sorted(r["gateway_cpu_us_per_send"] for r in rounds)[1]
        ),
    }
