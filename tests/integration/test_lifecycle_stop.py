"""STOP and reap on the real broker, two gateways as processes (R-PRES-6,
R-LIFE).

R-LIFE-1: "on stop or reap the worker's inbox goes away, so nothing is delivered to
the dead"; step 5: presence is what the fleet sees, so a stopped worker leaves every roster.
Host A runs ``main-a`` (pull); host B has a spawn profile whose worker is a real ``sleep``
process writing its pid file. The DLQ's FAILED reporter runs as host B (in a thread), as in
production, so a dead letter becomes the sender's one ``FAILED``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_client, build_control_client
from pipeline.bootstrap.reporters import build_failed_reporter
from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.cli.main import app
from pipeline.control import STOP, ControlClient
from pipeline.control.spawns import spawns_table
from pipeline.control.stops import stops_table
from pipeline.envelope import Envelope, Kind, encode
from pipeline.envelope.receipts import read_receipt
from pipeline.errors import DeliveryError
from pipeline.failures.reporter import reported_table
from pipeline.gateway.client import GatewayClient
from pipeline.host import deadlines, tracking
from pipeline.host.config import load_config
from pipeline.host.held import held_table
from pipeline.host.roster_cache import roster_cache_table
from pipeline.kafka.topics import TopicNames
from pipeline.record_headers import pack_headers
from pipeline.store import make_engine
from pipeline.support.processes import kill_recorded
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'


def _profile(markers: Path) -> str:
    """A worker is ``sleep`` (its pid in ``<gid>.pid``); stop kills it and leaves a marker."""
    m = markers
    return (
        f'[[profiles]]\nname = "sleeper"\ngroups = ["crew"]\n'
        f'launch = ["sh", "-c", "echo $$ > {m}/{{gid}}.pid; exec sleep 300"]\n'
        f'stop = ["sh", "-c", "touch {m}/stopped-{{gid}}; kill $(cat {m}/{{gid}}.pid)"]\n'
        f'[profiles.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "cat >> {m}/{{gid}}.in; echo >> {m}/{{gid}}.in"]\n'
    )


@dataclass
class Hosts:
    fleet: Fleet
    a_toml: Path
    client: GatewayClient
    control: ControlClient
    markers: Path
    b_store: Any
    b: GatewayProcess


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    markers = tmp_path / "markers"
    markers.mkdir()
    a_toml = fleet.config_file("A", MAIN_A, extra="spawn_deadline_s = 60.0")
    b_toml = fleet.config_file("B", _profile(markers))
    b = GatewayProcess(b_toml, tmp_path / "B.log").start()
    a = GatewayProcess(a_toml, tmp_path / "A.log").start()
    a_cfg, b_cfg = load_config(a_toml), load_config(b_toml)
    a_store, b_store = make_engine(a_cfg.store_url), make_engine(b_cfg.store_url)
    client = build_client(a_cfg, signer=fleet.signers["A"], engine=a_store)
    control = build_control_client(a_cfg, signer=fleet.signers["A"], engine=a_store)
    stop = threading.Event()
    reporter: Any = None
    reporting: threading.Thread | None = None
    try:
        wait_until(
            lambda: client.knows("B._gateway"), timeout_s=60, what="B's gateway entry in A's roster"
        )
        # B verifies main-a's SPAWNs against its own roster: an unheard sender is UNKNOWN_SENDER
        wait_until(lambda: _b_knows(b_store, "main-a"), timeout_s=60, what="main-a in B's roster")
        # the gateways created the topology (the DLQ among it) by now
        reporter = build_failed_reporter(b_cfg, signer=fleet.signers["B"], trust=fleet.trust)
        reporting = threading.Thread(target=reporter.run, kwargs={"should_stop": stop.is_set})
        reporting.start()
        yield Hosts(fleet, a_toml, client, control, markers, b_store, b)
    finally:
        stop.set()
        if reporting is not None:
            reporting.join(30)
        if reporter is not None:
            reporter.consumer.close()
            reporter.engine.dispose()
        a.stop()
        b.stop()
        for pidfile in markers.glob("*.pid"):  # workers outlive their gateway (own session)
            kill_recorded(pidfile)  # never a recycled pid: another test's process
        a_store.dispose()
        b_store.dispose()


def _b_knows(b_store: Any, gid: str) -> bool:
    with b_store.connect() as c:
        return (
            c.execute(select(roster_cache_table).where(roster_cache_table.c.gid == gid)).first()
            is not None
        )


def _answers(h: Hosts, want: int, timeout: float = 60) -> dict[str, tuple[str, str]]:
    """msgId -> (kind, reason) of each INJECTED/FAILED for main-a, once ``want`` have come;
    a second answer about one msgId fails the test."""
    got: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in h.client.poll("main-a", kinds=["INJECTED", "FAILED"]):
            receipt = read_receipt(m.kind, m.body)
            assert receipt.msg_id not in got, f"a second answer about {receipt.msg_id}"
            got[receipt.msg_id] = (m.kind, receipt.reason)
        if len(got) >= want:
            break
        time.sleep(0.05)
    return got


def _spawn(h: Hosts, *gids: str) -> None:
    reqs = [h.control.spawn(requester="main-a", host="B", profile="sleeper", spawn_id=g)
            for g in gids]  # fmt: skip
    got = _answers(h, len(gids))
    assert got == {r.msg_id: ("INJECTED", "") for r in reqs}
    for g in gids:
        wait_until(lambda g=g: h.client.knows(g), timeout_s=30, what=f"{g}'s presence at A")


def _pid(h: Hosts, gid: str) -> int:
    path = h.markers / f"{gid}.pid"
    wait_until(
        lambda: path.exists() and path.read_text().strip(), timeout_s=30, what=f"{gid}'s pid file"
    )
    return int(path.read_text())


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _spawn_row(h: Hosts, gid: str) -> Any:
    with h.b_store.connect() as c:
        return c.execute(select(spawns_table).where(spawns_table.c.spawn_id == gid)).first()


def _brief_past_the_roster(h: Hosts, to: str, body: bytes) -> Envelope:
    """A brief from main-a to ``to`` queued the way ``GatewayClient.send`` queues it, minus the
    roster check: what a sender whose roster has not yet heard the tombstone sends."""
    env = Envelope.new(kind=Kind.SEND, sender="main-a", to=to, body=body, ttl_s=3600)
    with h.client.sessions.begin() as s:
        h.client.publisher.stage(s, env, to_host="B")
        deadlines.track(s, tracking.FORWARD, msg_id=env.msg_id, sender="main-a", recipient=to,
                       trace_id=env.trace_id, sent_ms=env.ts_ms, deadline_ms=env.ts_ms + 60_000)  # fmt: skip
    return env


def _inbox(h: Hosts, gid: str) -> list[str]:
    path = h.markers / f"{gid}.in"
    return path.read_text().split() if path.exists() else []


def test_stop_tombstones_the_worker_and_later_mail_fails_once_with_recipient_gone(
    hosts: Hosts,
) -> None:
    """R-LIFE-1: STOP -> the worker's stop command runs,
    its process ends, its presence is tombstoned (A's binding of it is gone, not merely lapsed:
    the TTL is 30 s); a repeated STOP (same stopId) stops nothing and is answered again; a brief
    that still reaches B gives its sender exactly one FAILED (RECIPIENT_GONE); a later brief
    through ``fleet send`` is refused at once with RECIPIENT_GONE naming the cause (w-1's
    presence departure said ``stopped``); a broadcast reaches only the live member."""
    h = hosts
    _spawn(h, "w-1", "w-2")
    pid = _pid(h, "w-1")
    args = ["stop", "-c", str(h.a_toml), "--gid", "w-1", "--id", "stop-1", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    first = json.loads(out.output)
    assert (first["gid"], first["host"], first["stopId"]) == ("w-1", "B", "stop-1")
    again = CliRunner().invoke(app, [*args, "--host", "B"])  # its binding may be gone now
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert _answers(h, 2) == {
        first["msgId"]: ("INJECTED", ""),
        second["msgId"]: ("INJECTED", ""),
    }
    with h.client.sessions() as s:  # the requester's deadline rows: settled by the answers
        assert deadlines.answered(s, (STOP,), first["msgId"]) == "stopped"
    wait_until(lambda: h.client.binding("w-1") is None, timeout_s=30, what="w-1's tombstone at A")
    assert h.client.knows("w-2")
    assert (h.markers / "stopped-w-1").exists()
    wait_until(lambda: _gone(pid), timeout_s=30, what="w-1's process to end")
    row = _spawn_row(h, "w-1")
    assert (row.state, row.reason) == ("reaped", "stop")
    with h.b_store.connect() as c:
        assert [r.stop_id for r in c.execute(select(stops_table))] == ["stop-1"]

    # a later brief through the real CLI: A's roster kept w-1's departure, so it is refused at
    # once with the cause -- nothing queued, so no FAILED can follow
    send = ["send", "-c", str(h.a_toml), "--from", "main-a", "--to", "w-1", "too late", "--json"]
    refused = CliRunner().invoke(app, send)
    assert refused.exit_code == 1, refused.output
    why = json.loads(refused.stdout)["error"]
    assert (why["reason"], why["to"], why["gone"], why["host"]) == (
        "RECIPIENT_GONE",
        "w-1",
        "stopped",
        "B",
    )
    with pytest.raises(DeliveryError) as local:
        h.client.send(sender="main-a", to="w-1", body=b"too late")
    assert local.value.reason == "RECIPIENT_GONE"
    with pytest.raises(DeliveryError) as unknown:  # a gid never announced stays unknown
        h.client.send(sender="main-a", to="w-never", body=b"hello?")
    assert unknown.value.reason == "UNKNOWN_RECIPIENT"

    # the in-flight race: a brief queued before A's roster heard the departure still reaches B

    late = _brief_past_the_roster(h, "w-1", b"late-brief")
    assert _answers(h, 1) == {late.msg_id: ("FAILED", "RECIPIENT_GONE")}
    time.sleep(2.0)  # a second FAILED (the sender's deadline, a re-report) would land now
    assert _answers(h, 0, timeout=0.5) == {}

    assert h.client.broadcast(sender="main-a", group="crew", body=b"all-hands") == 1
    wait_until(lambda: "all-hands" in _inbox(h, "w-2"), timeout_s=30, what="the broadcast at w-2")
    assert "all-hands" not in _inbox(h, "w-1") and "late-brief" not in _inbox(h, "w-1")


def test_a_worker_whose_process_dies_is_reaped_and_mail_held_for_it_is_dead_lettered(
    hosts: Hosts,
) -> None:
    """R-LIFE-1, reap: the worker's process is killed -9 behind the gateway's back;
    B's sweep reaps it (tombstone, ``reaped`` with cause ``died``) and a STOP for it is then
    answered as done. A message held for it (planted in B's held store: spawned workers take
    delivery by inject, so only a race with the reap leaves one) is dead-lettered
    RECIPIENT_GONE, not kept forever: its sender gets one FAILED."""
    h = hosts
    _spawn(h, "w-d")
    os.kill(_pid(h, "w-d"), signal.SIGKILL)
    wait_until(lambda: h.client.binding("w-d") is None, timeout_s=30, what="w-d's tombstone at A")
    row = _spawn_row(h, "w-d")
    assert (row.state, row.reason) == ("reaped", "died")
    with pytest.raises(DeliveryError) as died:  # its departure said why it left
        h.client.send(sender="main-a", to="w-d", body=b"late")
    assert (died.value.reason, died.value.context["gone"]) == ("RECIPIENT_GONE", "died")

    env = Envelope.new(kind=Kind.SEND, sender="main-a", to="w-d", body=b"held", ttl_s=3600)
    topic = TopicNames(prefix=h.fleet.prefix).inbox("B")
    _, headers, value = encode(env, topic=topic, signer=h.fleet.signers["A"])
    now = int(time.time() * 1000)
    with h.b_store.begin() as c:
        c.execute(held_table.insert().values(
            recipient="w-d", msg_id=env.msg_id, kind="SEND", sender="main-a",
            trace_id=env.trace_id, turn_id=None, body=value, headers=pack_headers(headers),
            topic=topic, ts_ms=env.ts_ms, expires_at_ms=env.expires_at_ms, held_at_ms=now,
        ))  # fmt: skip
    stop = h.control.stop(requester="main-a", gid="w-d", host="B")
    got = _answers(h, 2)
    assert got == {stop.msg_id: ("INJECTED", ""), env.msg_id: ("FAILED", "RECIPIENT_GONE")}
    with h.b_store.connect() as c:
        left = c.execute(select(held_table).where(held_table.c.recipient == "w-d")).all()
    assert left == []
    time.sleep(2.0)
    assert Counter(_answers(h, 0, timeout=0.5)) == Counter()


def test_a_stop_whose_answer_never_comes_in_time_is_one_failed_stop_timeout(
    hosts: Hosts,
) -> None:
    """R-LIFE-3 (a STOP costs like a SPAWN: the requester tracks a deadline) and R-FAIL-6
    "no answer in time" scenario: host B's gateway is frozen (SIGSTOP) when the STOP is queued,
    so no outcome comes; A's deadline tracker gives main-a exactly one FAILED (STOP_TIMEOUT,
    about the gid). When B thaws, the STOP it finds (expired, or refused) answers main-a again
    with a FAILED about the same msgId: dropped, still exactly one."""
    h = hosts
    quick = ControlClient(
        sessions=h.control.sessions,
        publisher=h.control.publisher,
        deadline_s=2.0,
        local_senders=h.control.local_senders,
    )
    h.b.pause()
    try:
        req = quick.stop(requester="main-a", gid="w-frozen", host="B", stop_id="stop-frozen")
        assert _answers(h, 1) == {req.msg_id: ("FAILED", "STOP_TIMEOUT")}
        with h.client.sessions() as s:
            assert deadlines.answered(s, (STOP,), req.msg_id) == deadlines.FAILED
    finally:
        h.b.resume()

    def b_answered() -> bool:  # refused as UNKNOWN_WORKER, or dead-lettered and reported
        with h.b_store.connect() as c:
            stop = c.execute(select(stops_table).where(stops_table.c.stop_id == "stop-frozen"))
            reported = c.execute(
                select(reported_table).where(reported_table.c.original_msg_id == req.msg_id)
            )
            return stop.first() is not None or reported.first() is not None

    wait_until(b_answered, timeout_s=60, what="B to answer the thawed STOP")
    time.sleep(2.0)  # B's answer (a second FAILED, if it were not dropped) would land now
    assert _answers(h, 0, timeout=0.5) == {}
