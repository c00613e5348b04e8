"""On a real broker with gateways as processes: an outage is not a departure.

R-PRES-4 (``from`` lives on the signing host) rests on the last signed binding, and
routing on liveness judged against what the roster follower could read; the README's promise
"a send works while the broker is down" must hold past the presence TTL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.bootstrap.client import build_client
from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.envelope import Kind
from pipeline.gateway.client import GatewayClient
from pipeline.host.config import load_config
from pipeline.host.held import held_table
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import outbox
from pipeline.store import make_engine
from pipeline.support import waiting
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# The scenario (heartbeat every 1 s, TTL 5 s) at half scale: a TTL is still five
# heartbeats, and "three TTLs" still three TTLs (the roster's STALE mark comes after 5 s cut off).
INTERVAL_S = 0.5
TTL_S = 2.5
MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
MAIN_B = '[[entities]]\ngid = "main-b"\nrole = "main"\ndelivery = "pull"\n'
# Lines a gateway may log during an outage of any length (measured, then given headroom): the
# publisher's one warning, the roster's transient-error and STALE lines, the inbox consumer's
# and relay's first transport errors, and librdkafka's own connection-refused lines, which it
# rate-limits per broker connection. None of them is per heartbeat or per record.
OUTAGE_LOG_BOUND = 40
HEARTBEAT_TIMEOUT_S = 30.0  # producer_config's message.timeout.ms, which the publisher uses


@pytest.fixture
def procs() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for p in started:
        p.stop()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, nodes: int) -> LocalCluster:
    """The session's breakable one-node cluster, or its three-node one (conftest); each test
    gets every node running."""
    if nodes == 1:
        own: LocalCluster = request.getfixturevalue("kafka_own")
        return own
    handle: BrokerHandle = request.getfixturevalue("kafka3")
    assert handle.cluster is not None and len(handle.cluster.nodes) == nodes
    return handle.cluster


def _held(url: str) -> list[str]:
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as c:
            rows = c.execute(
                select(held_table.c.msg_id)
                .where(held_table.c.recipient == "main-b")
                .order_by(held_table.c.id)
            )
            return [r.msg_id for r in rows]
    finally:
        engine.dispose()


def _dead_letters(url: str, topics: TopicNames) -> int:
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as c:
            return len(list(c.execute(select(outbox.c.id).where(outbox.c.topic == topics.dlq))))
    finally:
        engine.dispose()


def _roster_json(config: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "roster", "--config", str(config), "--json", "--all"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _roster_lines(log: str) -> str:
    """The log's roster episode lines (STALE and current again), for a failure message."""
    return "\n".join(line for line in log.splitlines() if "roster: STALE" in line
                     or "roster: current again" in line)  # fmt: skip


def _stale_now(log: str) -> bool:
    """The gateway's roster is STALE now: its log's last episode line is a STALE one."""
    lines = _roster_lines(log).splitlines()
    return bool(lines) and "roster: STALE" in lines[-1]


def _cli_send(config: Path, body: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "send", "--config", str(config), "--from", "main-a",
         "--to", "main-b", "--kind", "REPLY", "--json", body],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    msg_id: str = json.loads(out.stdout)["msgId"]
    return msg_id


@dataclass
class TwoHosts:
    """Hosts A (main-a) and B (main-b) as gateway processes, and a client of A's."""

    fleet: Fleet
    cfg_a: Path
    cfg_b: Path
    a: GatewayProcess
    b: GatewayProcess
    client: GatewayClient

    def wait_until(self, cond: Any, *, timeout_s: float, what: str) -> None:
        try:
            waiting.wait_until(cond, timeout_s=timeout_s, what=what)
        except TimeoutError as exc:  # the gateways' own account of what went wrong
            raise TimeoutError(
                f"{exc}\n--- A.log (tail) ---\n{self.a.output()[-4000:]}"
                f"\n--- B.log (tail) ---\n{self.b.output()[-4000:]}"
            ) from None


def _two_hosts(cluster: LocalCluster, tmp_path: Path, procs: list[GatewayProcess]) -> TwoHosts:
    """A and B started (SQLite stores, INTERVAL_S, TTL_S), main-b live in A's view."""
    fleet = Fleet.create(tmp_path, cluster.bootstrap_servers, ("A", "B"))
    cfg_a = fleet.config_file("A", MAIN_A, presence_ttl_s=TTL_S, presence_interval_s=INTERVAL_S)
    cfg_b = fleet.config_file("B", MAIN_B, presence_ttl_s=TTL_S, presence_interval_s=INTERVAL_S)
    a, b = GatewayProcess(cfg_a, tmp_path / "A.log"), GatewayProcess(cfg_b, tmp_path / "B.log")
    procs += [a.start(), b.start()]
    client: GatewayClient = build_client(load_config(cfg_a), signer=fleet.signers["A"])
    hosts = TwoHosts(fleet, cfg_a, cfg_b, a, b, client)
    hosts.wait_until(lambda: client.knows("main-b"), timeout_s=90, what="main-b live in A's roster")
    return hosts


def _outage(
    cluster: LocalCluster, outage_s: float, tmp_path: Path, procs: list[GatewayProcess]
) -> tuple[list[str], list[str]]:
    """Hosts A and B as processes; replies main-a -> main-b before and during a kill -9 of every
    broker node lasting ``outage_s``; the brokers restart with their data. Returns (A's, B's)
    log lines written during the outage."""
    try:
        hosts = _two_hosts(cluster, tmp_path, procs)
        fleet, cfg_a, cfg_b, a, b, client = (
            hosts.fleet, hosts.cfg_a, hosts.cfg_b, hosts.a, hosts.b, hosts.client
        )  # fmt: skip
        wait_until = hosts.wait_until
        sent = [
            client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"before").msg_id
            for _ in range(5)
        ]
        url_b = load_config(cfg_b).store_url
        wait_until(lambda: len(_held(url_b)) == 5, timeout_s=60, what="the first replies held at B")
        # The outage's one STALE line is only logged by a view that is current when it starts. On
        # a loaded machine a roster can stall for its own seconds before the outage (the CI once
        # logged a STALE and a "current again" in the 12 s between start and kill); that episode
        # is not this outage's, so wait it out and count from the kill on.
        wait_until(
            lambda: not _stale_now(a.output()) and not _stale_now(b.output()),
            timeout_s=60,
            what="both rosters current before the outage",
        )
        lines_before = (len(a.output().splitlines()), len(b.output().splitlines()))
        for node in cluster.nodes:
            cluster.kill(node.spec.node_id)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < outage_s:
            # every send during the outage succeeds locally, long past the TTL
            sent.append(
                client.send(
                    sender="main-a", to="main-b", kind=Kind.REPLY, body=f"{i}".encode()
                ).msg_id
            )
            i += 1
            time.sleep(0.5)
        sent.append(_cli_send(cfg_a, "via the CLI, broker still down"))
        view = _roster_json(cfg_a)
        assert view["stale"] is True, view
        assert {e["gid"]: e["live"] for e in view["entries"]}["main-b"] is True, view
        lines_during = (
            a.output().splitlines()[lines_before[0] :],
            b.output().splitlines()[lines_before[1] :],
        )
        cluster.start_again()
        wait_until(
            lambda: len(_held(url_b)) >= len(sent), timeout_s=180, what="B to hold every reply"
        )
        time.sleep(3.0)  # a last redelivery window: duplicates would show up now
        assert _held(url_b) == sent, "each reply held exactly once, in send order"
        assert _dead_letters(url_b, TopicNames(prefix=fleet.prefix)) == 0
        assert a.proc is not None and a.proc.poll() is None, a.output()[-2000:]
        assert b.proc is not None and b.proc.poll() is None, b.output()[-2000:]
        wait_until(
            lambda: _roster_json(cfg_a)["stale"] is False and not _stale_now(b.output()),
            timeout_s=60,
            what="A's and B's rosters current again",
        )
        for log, skip in zip((a.output(), b.output()), lines_before, strict=True):
            episodes = _roster_lines(log)
            since_kill = "\n".join(log.splitlines()[skip:])
            assert since_kill.count("roster: STALE") == 1, episodes + "\n" + log[-3000:]
            assert since_kill.count("roster: current again") == 1, episodes + "\n" + log[-3000:]
            # One warning, never one per heartbeat. A heartbeat is reported undelivered only once
            # the producer's message.timeout.ms (30 s) passes without a broker: an outage longer
            # than that must produce the warning; a shorter one produces it only if the restart
            # itself is slow (the race the CI hit: a broker back within 30 s delivered them all).
            undelivered = log.count("heartbeats not delivered")
            assert undelivered == 1 if outage_s > HEARTBEAT_TIMEOUT_S else undelivered <= 1, log[
                -3000:
            ]
            assert log.count("heartbeats delivered again") == undelivered, log[-3000:]
        return lines_during
    finally:
        for p in procs:
            p.stop()


@pytest.mark.parametrize("nodes", [1, 3])
def test_an_outage_three_ttls_long_loses_and_dead_letters_nothing(
    cluster: LocalCluster, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """Broker(s) kill -9'd for 3x the presence TTL. Every send succeeds
    locally, the view says STALE and keeps main-b live; after the restart every reply is held
    exactly once in send order and none is dead-lettered (UNKNOWN_SENDER was the bug)."""
    _outage(cluster, 3 * TTL_S, tmp_path, procs)


def test_a_sixty_second_outage_logs_a_bounded_number_of_lines(
    kafka_own: LocalCluster, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """The gateway log during a 60 s outage holds at most OUTAGE_LOG_BOUND lines per gateway
    (no line per heartbeat, per retry or per record)."""
    during_a, during_b = _outage(kafka_own, 60.0, tmp_path, procs)
    print(f"outage log lines: A={len(during_a)} B={len(during_b)}")
    assert len(during_a) <= OUTAGE_LOG_BOUND, "\n".join(during_a)
    assert len(during_b) <= OUTAGE_LOG_BOUND, "\n".join(during_b)


@pytest.mark.parametrize("nodes", [3])
def test_one_broker_killed_stalls_the_roster_and_lapses_nobody(
    cluster: LocalCluster, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """A partial outage: a follower replica of the roster partition is kill -9'd. Its
    ISR still counts it until the controller fences it, so no heartbeat commits (acks=all) while
    the log end stays readable; a horizon taken from the log end alone ran on past main-b's
    last readable heartbeat and main-b lapsed in A's view (CI: the sequential kill of three
    nodes). Nobody may lapse while nobody's heartbeat can be read."""
    try:
        hosts = _two_hosts(cluster, tmp_path, procs)
        roster = TopicNames(prefix=hosts.fleet.prefix).roster
        leader = cluster.leader_of(roster)
        follower = next(n.spec.node_id for n in cluster.nodes if n.spec.node_id != leader)
        cluster.kill(follower)
        lapsed: list[float] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4 * TTL_S + 5.0:  # the fencing (9 s) and past it
            if not hosts.client.knows("main-b"):
                lapsed.append(round(time.monotonic() - t0, 1))
            time.sleep(0.2)
        assert not lapsed, f"main-b lapsed in A's view at {lapsed} s after the kill"
        # the roster commits again once the node is fenced: the view is current, main-b live
        hosts.wait_until(
            lambda: _roster_json(hosts.cfg_a)["stale"] is False, timeout_s=60, what="current"
        )
        assert hosts.client.knows("main-b")
    finally:
        for p in procs:
            p.stop()
