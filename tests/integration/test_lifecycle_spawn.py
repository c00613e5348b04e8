"""Cross-host spawn on the real broker, two gateways (R-SPAWN, R-FAIL-8).

The launch command is a real process that leaves one marker file per launch, so launches are
counted by files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_control_client
from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.cli.main import app
from pipeline.envelope import Kind
from pipeline.envelope.receipts import read_receipt
from pipeline.host.entity_config import EntityConfig, InjectorSpec, ProfileConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.settings import producer_config
from pipeline.outbox.tables import outbox
from pipeline.presence.roles import Delivery, Role
from pipeline.record_headers import unpack_headers
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _profile(markers: Path, **caps: int) -> ProfileConfig:
    return ProfileConfig(
        name="shell",
        launch=("sh", "-c", f"touch {markers}/launch-{{gid}}-$$"),
        check=("true",),  # the launch exits at once: without a check the reaper would reap it
        injector=InjectorSpec(type="command", command=("sh", "-c", f"cat >> {markers}/{{gid}}.in")),
        **caps,
    )


def _gateway(fleet: Fleet, host: str, tmp: Path, **kw: Any) -> GatewayParts:
    cfg = GatewayConfig(
        host=host,
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{tmp / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        spawn_deadline_s=30.0,
        **kw,
    )
    return build_gateway(cfg, signer=fleet.signers[host], trust=fleet.trust)


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[tuple[Any, ...]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    markers = tmp_path / "markers"
    markers.mkdir()
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    a = _gateway(fleet, "A", tmp_path, entities=(main,))
    b = _gateway(fleet, "B", tmp_path, profiles=(_profile(markers, max_live_per_job=1),))
    a.gateway.start()
    b.gateway.start()
    control = build_control_client(
        GatewayConfig(host="A", topic_prefix=fleet.prefix, entities=(main,), spawn_deadline_s=30.0),
        signer=fleet.signers["A"],
        engine=a.engine,
    )
    try:
        wait_until(
            lambda: a.client.knows("B._gateway"),
            timeout_s=60,
            what="B's gateway entry in A's roster",
        )
        yield a, control, markers, b
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _outcomes(a: GatewayParts, want: int) -> dict[str, tuple[str, str]]:
    """msgId of each SPAWN -> (kind, reason) of its one answer, once ``want`` have come."""
    got: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for m in a.client.poll("main-a", kinds=["INJECTED", "FAILED"]):
            receipt = read_receipt(m.kind, m.body)
            assert receipt.msg_id not in got, f"a second answer for {receipt.msg_id}"
            got[receipt.msg_id] = (m.kind, receipt.reason)
        if len(got) >= want:
            break
        time.sleep(0.05)
    return got


def _spawns(b: GatewayParts, outcome: str) -> float:
    value = b.registry.get_sample_value("fleet_lifecycle_spawns_total", {"outcome": outcome})
    return value or 0.0


def _launches(markers: Path) -> list[str]:
    return sorted(
        p.name.split("-")[1] + "-" + p.name.split("-")[2] for p in markers.glob("launch-*")
    )


def test_a_spawn_sent_twice_and_delivered_twice_starts_one_worker(hosts: Any) -> None:
    """R-SPAWN-2: spawn deduped by spawnId. The requester sends the same spawnId twice and
    the broker carries the first SPAWN record twice: one launch, each request answered once."""
    a, control, markers, b = hosts
    first = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-1", brief="go")
    with a.engine.connect() as c:
        row = c.execute(
            select(outbox).where(outbox.c.lsn == 1, outbox.c.topic.like("%control%"))
        ).first()
    assert row is not None
    producer = Producer(producer_config(a.runtime.config.bootstrap))
    producer.produce(
        row.topic, key=bytes(row.key), value=bytes(row.value), headers=unpack_headers(row.headers)
    )
    producer.flush(10)
    second = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-1")
    got = _outcomes(a, 2)
    assert got == {first.msg_id: ("INJECTED", ""), second.msg_id: ("INJECTED", "")}
    time.sleep(2.0)  # a late duplicate launch would show up now
    assert _launches(markers) == ["w-1"] and len(list(markers.glob("launch-*"))) == 1
    wait_until(
        lambda: a.client.knows("w-1"), timeout_s=30, what="the spawned worker's presence at A"
    )
    brief = a.client.send(sender="main-a", to="w-1", body=b"first brief")
    injected = _outcomes(a, 1)
    assert injected == {brief.msg_id: ("INJECTED", "")}
    assert (markers / "w-1.in").read_bytes() == b"first brief"
    assert _spawns(b, "spawned") == 1 and _spawns(b, "repeat") == 1
    toml = markers.parent / "b-workers.toml"
    toml.write_text(f'host = "B"\nstore_url = "{b.engine.url}"\n')
    out = CliRunner().invoke(app, ["workers", "-c", str(toml), "--json"])
    assert out.exit_code == 0, out.output
    (w,) = json.loads(out.output)
    assert (w["gid"], w["parent"], w["job"], w["profile"]) == ("w-1", "main-a", None, "shell")
    # a live spawned worker is a local sender of B: its reply reaches the main at A
    b.client.send(sender="w-1", to="main-a", kind=Kind.REPLY, body=b"done")
    replies: list[Any] = []
    wait_until(
        lambda: replies.extend(a.client.poll("main-a", kinds=["REPLY"])) or replies,
        timeout_s=30,
        what="the worker's reply at A",
    )
    assert [(m.sender, m.body) for m in replies] == [("w-1", b"done")]


def test_unknown_profile_and_over_cap_are_refused_with_their_reasons(hosts: Any) -> None:
    """R-FAIL-8: a cap on subagents per job -> CAP_EXCEEDED; an unknown profile has
    its own reason (UNKNOWN_PROFILE). Neither launches anything."""
    a, control, markers, b = hosts
    ok = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-j1", job="j")
    assert _outcomes(a, 1) == {ok.msg_id: ("INJECTED", "")}
    over = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-j2", job="j")
    unknown = control.spawn(requester="main-a", host="B", profile="nope", spawn_id="w-x")
    again = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-j2", job="j")
    got = _outcomes(a, 3)
    assert got == {
        over.msg_id: ("FAILED", "CAP_EXCEEDED"),
        unknown.msg_id: ("FAILED", "UNKNOWN_PROFILE"),
        again.msg_id: ("FAILED", "CAP_EXCEEDED"),  # a repeat is answered as the first was
    }
    assert len(list(markers.glob("launch-*"))) == 1
    assert _spawns(b, "refused_cap_exceeded") == 1
    assert _spawns(b, "refused_unknown_profile") == 1
    assert _spawns(b, "repeat") == 1


def test_kill9_between_committing_a_spawn_and_launching_never_launches_and_fails_once(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-SPAWN-3 priced like R-ACK-3's forward path: commit BEFORE launch. B is killed -9 right
    after committing the SPAWN (FLEET_FAULT=crash_after_commit): nothing is launched, not even
    after B restarts, and the requester gets exactly one FAILED."""
    from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess

    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    markers = tmp_path / "markers"
    markers.mkdir()
    profile = (
        f'[[profiles]]\nname = "shell"\nlaunch = ["sh", "-c", "touch {markers}/launch-{{gid}}-$$"]\n'
        f'[profiles.injector]\ntype = "command"\ncommand = ["sh", "-c", "cat >> {markers}/x"]\n'
    )
    b_cfg = fleet.config_file("B", profile)
    crashing = GatewayProcess(b_cfg, tmp_path / "B1.log", env={"FLEET_FAULT": "crash_after_commit"})
    crashing.start()
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    a = _gateway(fleet, "A", tmp_path, entities=(main,))
    a.gateway.start()
    restarted: GatewayProcess | None = None
    try:
        control = build_control_client(
            GatewayConfig(host="A", topic_prefix=fleet.prefix, entities=(main,),
                          spawn_deadline_s=20.0),
            signer=fleet.signers["A"],
            engine=a.engine,
        )  # fmt: skip
        wait_until(
            lambda: a.client.knows("B._gateway"),
            timeout_s=60,
            what="B's gateway entry in A's roster",
        )
        req = control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-k")
        assert crashing.wait_exit(60) == 137, crashing.output()[-2000:]
        restarted = GatewayProcess(b_cfg, tmp_path / "B2.log").start()
        got = _outcomes(a, 1)
        time.sleep(3.0)  # a second answer (restart's or deadline's) would arrive now
        got.update(_outcomes(a, 0))
        assert list(got) == [req.msg_id] and got[req.msg_id][0] == "FAILED", got
        assert got[req.msg_id][1] in ("LAUNCH_INTERRUPTED", "SPAWN_TIMEOUT")
        assert list(markers.glob("launch-*")) == [], "committed, so never launched"
    finally:
        a.gateway.stop()
        crashing.stop()
        if restarted is not None:
            restarted.stop()
