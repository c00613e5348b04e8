"""``fleet dlq replay`` into a live gateway process (R-DLQ-3: replay is safe only because
consumers are idempotent; here the consumer is the production gateway, not a stand-in).

The DLQ holds dead letters of two sorts, on two keys (the record key is the recipient): copies
of replies gateway B already held (a DLQ write that timed out and landed late leaves such a
duplicate, ``docs/failures.md``), and replies B never received. One ``fleet dlq replay`` puts all
of them back on B's inbox; B's dedupe must drop the first sort, hold the second once each, and
keep each key's order.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.envelope import Envelope, Kind, encode
from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DeadLetterWriter
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.store import make_engine
from pipeline.support.processes import fleet_env
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.dlq_helpers import high_watermarks, read_all
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPLAY = 'reason="REPLAY"'

MAINS_B = "".join(
    f'[[entities]]\ngid = "{gid}"\nrole = "main"\ndelivery = "pull"\n'
    for gid in ("main-b", "main-b2")
)


class MeteredGateway(GatewayProc):
    """The gateway process with its metrics endpoint on ``port`` (loopback)."""

    def __init__(self, config: Path, log: Path, port: int) -> None:
        super().__init__(config, log)
        self.port = port

    def command(self) -> list[str]:
        return [*super().command(), "--metrics-port", str(self.port)]

    def sample(self, name: str, label: str = "") -> float:
        """The sum of the samples of ``name`` (with ``label``, e.g. ``reason="REPLAY"``, among
        their labels) the endpoint shows; 0 when none."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if (line.startswith(name + "{") or line.startswith(name + " ")) and label in line
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fleet(kafka: BrokerHandle, tmp_path: Path) -> Fleet:
    return Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))


@pytest.fixture
def gateway_b(fleet: Fleet, tmp_path: Path) -> Iterator[MeteredGateway]:
    proc = MeteredGateway(fleet.config_file("B", MAINS_B), tmp_path / "B.log", _free_port())
    proc.start()
    try:
        wait_until(proc.ready, timeout_s=90, what="gateway B running")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def host_a(fleet: Fleet, tmp_path: Path) -> Iterator[GatewayParts]:
    cfg = GatewayConfig(
        host="A",
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{tmp_path / 'A-inproc.sqlite'}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
    )
    parts = build_gateway(cfg, signer=fleet.signers["A"], trust=fleet.trust)
    parts.gateway.start()
    try:
        yield parts
    finally:
        parts.gateway.stop()


def _held(store_url: str) -> list[tuple[str, str, bytes]]:
    """B's held replies in hold order: (recipient, msgId, body)."""
    engine = make_engine(store_url, create=False)
    try:
        with engine.connect() as c:
            rows = c.execute(
                select(held_table.c.recipient, held_table.c.msg_id, held_table.c.body)
                .where(held_table.c.kind == "REPLY")
                .order_by(held_table.c.id)
            )
            return [(r.recipient, r.msg_id, bytes(r.body)) for r in rows]
    finally:
        engine.dispose()


def test_replay_into_a_live_gateway_drops_the_applied_and_holds_the_rest_once_in_key_order(
    fleet: Fleet, tmp_path: Path, gateway_b: MeteredGateway, host_a: GatewayParts
) -> None:
    """R-DLQ-3 (an owner's replay tool; replay has no second effect) against a running gateway
    B: of 16 dead letters over two keys, the 8 B already held are dropped by B's own dedupe
    rows (counted on its metrics endpoint), the 8 it never saw are held exactly once, and each
    recipient's replies are held in the order they were sent."""
    topics = TopicNames(prefix=fleet.prefix)
    inbox_b, store_b = topics.inbox("B"), fleet.rig.store_url("B")
    recipients = ("main-b", "main-b2")
    wait_until(
        lambda: all(host_a.client.knows(g) for g in recipients),
        timeout_s=60,
        what="B's mains in A's roster",
    )
    applied = [
        host_a.client.send(
            sender="main-a", to=recipients[i % 2], kind=Kind.REPLY, body=f"r{i}".encode()
        )
        for i in range(8)
    ]
    wait_until(lambda: len(_held(store_b)) == 8, timeout_s=60, what="B holds the 8 replies")
    on_inbox = read_all(fleet.bootstrap, inbox_b, 8)
    assert sorted(dict(m.headers())["msgId"].decode() for m in on_inbox) == sorted(
        e.msg_id for e in applied
    )
    # replies main-a signed that never reached B (dead-lettered before B applied them)
    never_seen = [
        Envelope.new(
            kind=Kind.REPLY,
            sender="main-a",
            to=recipients[i % 2],
            body=f"r{i}".encode(),
            ttl_s=600,
        )
        for i in range(8, 16)
    ]
    writer = DeadLetterWriter(fleet.bootstrap, topics, "B", group="fleet.gateway.B")
    try:
        for offset, msg in enumerate(on_inbox):
            writer.send(_failure(Record.from_message(msg), offset))
        for offset, env in enumerate(never_seen, start=1000):
            key, headers, value = encode(env, topic=inbox_b, signer=fleet.signers["A"])
            record = Record(
                topic=inbox_b,
                partition=0,
                offset=offset,
                timestamp_ms=env.ts_ms,
                key=key,
                headers=tuple(headers),
                value=value,
            )
            writer.send(_failure(record, offset))
    finally:
        writer.close()
    drops_before = gateway_b.sample("fleet_dedupe_hits_total")
    start = high_watermarks(fleet.bootstrap, inbox_b)

    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "dlq", "replay", "--bootstrap", fleet.bootstrap,
         "--prefix", fleet.prefix, "--json"],
        capture_output=True, text=True, timeout=120, env=fleet_env(), check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"replayed": 16, "by_topic": {inbox_b: 16}, "skipped": 0}
    assert len(read_all(fleet.bootstrap, inbox_b, 16, start=start)) == 16, "all 16 on B's inbox"

    wait_until(lambda: len(_held(store_b)) >= 16, timeout_s=60, what="B holds the 8 new ones")
    wait_until(
        lambda: gateway_b.sample("fleet_dedupe_hits_total") >= drops_before + 8,
        timeout_s=60,
        what="B's dedupe to drop the 8 applied ones",
    )
    time.sleep(2.0)  # a last window: a second hold of anything would show up now
    held = _held(store_b)
    # the runtime's dedupe rows dropped exactly the applied ones (the verifier's seen-set, the
    # second line, had nothing left to catch)
    assert gateway_b.sample("fleet_dedupe_hits_total") == drops_before + 8
    assert gateway_b.sample("fleet_gateway_verification_failures_total", REPLAY) == 0
    assert Counter(m for _r, m, _b in held) == Counter(
        [e.msg_id for e in applied] + [e.msg_id for e in never_seen]
    ), "every reply held exactly once"
    for gid in recipients:
        bodies = [b.decode() for r, _m, b in held if r == gid]
        want = [f"r{i}" for i in range(16) if recipients[i % 2] == gid]
        assert bodies == want, f"{gid}: replies held out of send order"
    assert host_a.client.poll("main-a") == [], "no FAILED or refusal came back to the sender"
    assert len(list(dlq_ops.scan(fleet.bootstrap, topics.dlq))) == 16, "B dead-lettered none"


def _failure(record: Record, offset: int) -> FailureContext:
    return FailureContext(
        record=record,
        reason="RETRIES_EXHAUSTED",
        error="store unavailable",
        attempts=5,
        first_failure_ms=record.timestamp_ms + 1,
        last_failure_ms=record.timestamp_ms + 2 + offset,
    )
