"""Who may SPAWN and STOP, and no orphans, on the real broker with gateways as processes
(R-LIFE-4, R-SPAWN-6, R-LIFE-5).

Host A runs four pull entities: ``main-a`` and ``main-x`` (mains), ``worker-x`` (a worker) and
``ops-x`` (a worker named an operator in B's config). Host B spawns real ``sleep`` processes
(each writes its pid file) from two profiles: ``sleeper`` (anyone may spawn it) and ``locked``
(``spawn_allowed`` lists ``main-a`` only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.bootstrap.client import build_client, build_control_client
from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.control import ControlClient
from pipeline.control.orphans import group_members
from pipeline.control.spawns import spawns_table
from pipeline.control.stops import stops_table
from pipeline.envelope.receipts import Receipt, read_receipt
from pipeline.gateway.client import GatewayClient
from pipeline.host.config import load_config
from pipeline.host.roster_cache import roster_cache_table
from pipeline.store import make_engine
from pipeline.support.processes import kill_recorded
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SENDERS = ("main-a", "main-x", "worker-x", "ops-x")
ENTITIES_A = "".join(
    f'[[entities]]\ngid = "{gid}"\nrole = "{"main" if gid.startswith("main") else "worker"}"\n'
    'delivery = "pull"\n'
    for gid in SENDERS
)


def _profiles(markers: Path) -> str:
    m = markers
    return "".join(
        f'[[profiles]]\nname = "{name}"\n'
        f'launch = ["sh", "-c", "echo $$ > {m}/{{gid}}.pid; exec sleep 300"]\n'
        f"{allowed}"
        f'[profiles.injector]\ntype = "command"\ncommand = ["sh", "-c", "cat >> {m}/x"]\n'
        for name, allowed in (
            ("sleeper", ""),
            ("locked", 'spawn_allowed = { gids = ["main-a"] }\n'),
        )
    )


@dataclass
class Hosts:
    client: GatewayClient
    control: ControlClient
    markers: Path
    b_store: Any


def _knows(store: Any, gid: str) -> bool:
    with store.connect() as c:
        t = roster_cache_table
        return c.execute(select(t).where(t.c.gid == gid)).first() is not None


def _kill_workers(markers: Path) -> None:
    for pidfile in markers.glob("*.pid"):  # workers outlive their gateway (own session)
        kill_recorded(pidfile, group=True)  # never a recycled pid: another test's group


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    markers = tmp_path / "markers"
    markers.mkdir()
    a_toml = fleet.config_file("A", ENTITIES_A, extra="spawn_deadline_s = 60.0")
    b_toml = fleet.config_file("B", _profiles(markers), extra='operators = ["ops-x"]')
    b = GatewayProcess(b_toml, tmp_path / "B.log").start()
    a = GatewayProcess(a_toml, tmp_path / "A.log").start()
    a_cfg, b_cfg = load_config(a_toml), load_config(b_toml)
    a_store, b_store = make_engine(a_cfg.store_url), make_engine(b_cfg.store_url)
    try:
        client = build_client(a_cfg, signer=fleet.signers["A"], engine=a_store)
        control = build_control_client(a_cfg, signer=fleet.signers["A"], engine=a_store)
        wait_until(lambda: client.knows("B._gateway"), timeout_s=60, what="B's gateway at A")
        for gid in SENDERS:  # B verifies each sender against its own roster
            wait_until(lambda g=gid: _knows(b_store, g), timeout_s=60, what=f"{gid} at B")
        yield Hosts(client, control, markers, b_store)
    finally:
        a.stop()
        b.stop()
        _kill_workers(markers)
        a_store.dispose()
        b_store.dispose()


def _answers(h: Hosts, want: int, timeout: float = 60) -> dict[str, tuple[str, Receipt]]:
    """msgId -> (kind, receipt) of each INJECTED/FAILED for any sender, once ``want`` came; a
    second answer about one msgId fails the test."""
    got: dict[str, tuple[str, Receipt]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(got) < want:
        for gid in SENDERS:
            for m in h.client.poll(gid, kinds=["INJECTED", "FAILED"]):
                receipt = read_receipt(m.kind, m.body)
                assert receipt.msg_id not in got, f"a second answer about {receipt.msg_id}"
                got[receipt.msg_id] = (m.kind, receipt)
        time.sleep(0.05)
    return got


def _outcomes(h: Hosts, reqs: list[Any]) -> list[tuple[str, str]]:
    got = _answers(h, len(reqs))
    assert set(got) == {r.msg_id for r in reqs}, got
    return [(got[r.msg_id][0], got[r.msg_id][1].reason) for r in reqs]


def _pid(h: Hosts, gid: str) -> int:
    path = h.markers / f"{gid}.pid"
    wait_until(lambda: path.exists() and path.read_text().strip(), timeout_s=30, what=f"{gid} pid")
    return int(path.read_text())


def _alive(pid: int) -> bool:
    return bool(group_members(pid))


def _row(h: Hosts, gid: str) -> Any:
    with h.b_store.connect() as c:
        return c.execute(select(spawns_table).where(spawns_table.c.spawn_id == gid)).first()


def test_a_stop_is_refused_not_permitted_unless_from_the_spawner_a_main_of_its_job_or_an_operator(
    hosts: Hosts,
) -> None:
    """R-LIFE-4: a worker and a main of no shared job are refused NOT_PERMITTED (one FAILED
    each, the worker keeps running, its row stays live); the spawner, a main that spawned into
    the worker's job, and an operator named in B's config stop theirs."""
    h = hosts
    spawns = [
        h.control.spawn(requester="main-a", host="B", profile="sleeper", spawn_id=gid, job=job)
        for gid, job in (("w-1", "J"), ("w-2", None), ("w-3", "J"))
    ]
    spawns.append(
        h.control.spawn(requester="main-x", host="B", profile="sleeper", spawn_id="w-x", job="J")
    )
    assert _outcomes(h, spawns) == [("INJECTED", "")] * 4
    pids = {gid: _pid(h, gid) for gid in ("w-1", "w-2", "w-3")}

    refused = [
        h.control.stop(requester="worker-x", gid="w-1", host="B"),  # a worker, not its spawner
        h.control.stop(requester="main-x", gid="w-2", host="B"),  # a main, but w-2 has no job
    ]
    got = _answers(h, 2)
    assert [(got[r.msg_id][0], got[r.msg_id][1].reason) for r in refused] == [
        ("FAILED", "NOT_PERMITTED")
    ] * 2
    why = got[refused[0].msg_id][1].error
    assert "worker-x@A" in why and "main-a@A" in why, why  # says who asked and who may
    time.sleep(2.0)  # a second answer, or a stop run anyway, would show now
    assert _answers(h, 0, timeout=0.5) == {}
    assert _alive(pids["w-1"]) and _alive(pids["w-2"])
    assert (_row(h, "w-1").state, _row(h, "w-2").state) == ("live", "live")
    with h.b_store.connect() as c:
        rows = {r.stop_id: (r.state, r.reason) for r in c.execute(select(stops_table))}
    assert sorted(rows.values()) == [("refused", "NOT_PERMITTED")] * 2

    permitted = [
        h.control.stop(requester="main-x", gid="w-1", host="B"),  # a main of job J
        h.control.stop(requester="ops-x", gid="w-2", host="B"),  # an operator of B
        h.control.stop(requester="main-a", gid="w-3", host="B"),  # its spawner
    ]
    assert _outcomes(h, permitted) == [("INJECTED", "")] * 3
    for gid, pid in pids.items():
        wait_until(lambda p=pid: not _alive(p), timeout_s=30, what=f"{gid}'s process to end")
        assert _row(h, gid).state == "reaped"


def test_a_spawn_of_a_profile_that_does_not_list_the_requester_is_refused_not_permitted(
    hosts: Hosts,
) -> None:
    """R-SPAWN-6: ``locked`` lists main-a only: worker-x's SPAWN is one FAILED NOT_PERMITTED
    and starts nothing (its row is refused, no pid file); main-a's starts its worker."""
    h = hosts
    reqs = [
        h.control.spawn(requester="worker-x", host="B", profile="locked", spawn_id="w-no"),
        h.control.spawn(requester="main-a", host="B", profile="locked", spawn_id="w-yes"),
    ]
    assert _outcomes(h, reqs) == [("FAILED", "NOT_PERMITTED"), ("INJECTED", "")]
    _pid(h, "w-yes")
    time.sleep(2.0)  # a second answer would show now
    assert _answers(h, 0, timeout=0.5) == {}
    assert (_row(h, "w-no").state, _row(h, "w-no").reason) == ("refused", "NOT_PERMITTED")
    assert not (h.markers / "w-no.pid").exists()


def test_a_gateway_killed_between_launch_and_live_leaves_no_process_of_that_launch(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-LIFE-5: B dies (exit 137, as kill -9) right after starting a worker, before its row is
    live (FLEET_FAULT=crash_after_launch). The worker's process group (a shell and two sleeps)
    outlives it; B's restart fails the spawn LAUNCH_INTERRUPTED, one FAILED saying the group was
    ended, and no process of that group is left."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    markers = tmp_path / "markers"
    markers.mkdir()
    profile = (
        f'[[profiles]]\nname = "pair"\n'
        f'launch = ["sh", "-c", "echo $$ > {markers}/{{gid}}.pid; sleep 300 & sleep 300"]\n'
        f'[profiles.injector]\ntype = "command"\ncommand = ["sh", "-c", "cat >> {markers}/x"]\n'
    )
    a_toml = fleet.config_file("A", ENTITIES_A, extra="spawn_deadline_s = 60.0")
    b_toml = fleet.config_file("B", profile)
    crashing = GatewayProcess(
        b_toml, tmp_path / "B1.log", env={"FLEET_FAULT": "crash_after_launch"}
    )
    crashing.start()
    a = GatewayProcess(a_toml, tmp_path / "A.log").start()
    a_cfg, b_cfg = load_config(a_toml), load_config(b_toml)
    a_store, b_store = make_engine(a_cfg.store_url), make_engine(b_cfg.store_url)
    restarted: GatewayProcess | None = None
    try:
        h = Hosts(
            build_client(a_cfg, signer=fleet.signers["A"], engine=a_store),
            build_control_client(a_cfg, signer=fleet.signers["A"], engine=a_store),
            markers,
            b_store,
        )
        wait_until(lambda: h.client.knows("B._gateway"), timeout_s=60, what="B's gateway at A")
        wait_until(lambda: _knows(b_store, "main-a"), timeout_s=60, what="main-a at B")
        req = h.control.spawn(requester="main-a", host="B", profile="pair", spawn_id="w-o")
        assert crashing.wait_exit(60) == 137, crashing.output()[-2000:]
        pgid = _pid(h, "w-o")
        row = _row(h, "w-o")
        assert (row.state, row.pid) == ("launching", pgid)  # recorded at launch, not yet live
        wait_until(lambda: len(group_members(pgid)) == 3, timeout_s=30, what="sh + two sleeps")

        restarted = GatewayProcess(b_toml, tmp_path / "B2.log").start()
        got = _answers(h, 1)
        assert list(got) == [req.msg_id], got
        kind, receipt = got[req.msg_id]
        assert (kind, receipt.reason) == ("FAILED", "LAUNCH_INTERRUPTED")
        assert f"process group {pgid} was ended" in receipt.error, receipt.error
        assert group_members(pgid) == []
        assert _row(h, "w-o").state == "failed"
        time.sleep(2.0)  # a second answer would show now
        assert _answers(h, 0, timeout=0.5) == {}
    finally:
        a.stop()
        crashing.stop()
        if restarted is not None:
            restarted.stop()
        _kill_workers(markers)
        a_store.dispose()
        b_store.dispose()
