"""Crash, fencing and zombie tests: gateways as real processes, killed for real.

Each test names the requirement it checks (docs/requirements.md).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.envelope import Kind
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.outbox.sent import is_pending
from pipeline.outbox.tables import outbox
from pipeline.presence.roles import Delivery, Role
from pipeline.store import make_engine
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'


def _worker_b(log: Path) -> str:
    return (
        '[[entities]]\ngid = "worker-b"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {log}"]\ntimeout_s = 5.0\n'
    )


def _in_process(
    fleet: Fleet,
    host: str,
    tmp: Path,
    entities: tuple[EntityConfig, ...],
    callbacks: Any = None,
    **kw: Any,
) -> GatewayParts:
    cfg = GatewayConfig(
        host=host,
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{tmp / (host + '-inproc.sqlite')}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=entities,
        **kw,
    )
    return build_gateway(cfg, signer=fleet.signers[host], trust=fleet.trust, callbacks=callbacks)


@pytest.fixture
def fleet(kafka: BrokerHandle, tmp_path: Path) -> Fleet:
    return Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))


@pytest.fixture
def procs() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for p in started:
        p.stop()


def test_pull_path_survives_kill9_twenty_times(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """R-ACK-2 reply path: hold + dedupe row in one transaction, then commit. kill -9 at
    random points: every acknowledged reply is held exactly once, none lost, order kept."""
    a_proc = GatewayProcess(fleet.config_file("A", MAIN_A), tmp_path / "A.log")
    procs.append(a_proc.start())
    b = _in_process(
        fleet,
        "B",
        tmp_path,
        (
            EntityConfig(
                gid="worker-b",
                role=Role.WORKER,
                delivery=Delivery.INJECT,
                injector=InjectorSpec(type="callback", callback="worker-b"),
            ),
        ),
        callbacks={"worker-b": lambda **_kw: None},
    )
    b.gateway.start()
    sent: list[str] = []
    stop = threading.Event()

    def sender() -> None:  # a steady stream of replies into main-a while A keeps dying
        i = 0
        while not stop.is_set():
            env = b.client.send(
                sender="worker-b", to="main-a", kind=Kind.REPLY, body=f"{i}".encode()
            )
            sent.append(env.msg_id)
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=sender)
    try:
        wait_until(lambda: b.client.knows("main-a"), timeout_s=60, what="main-a in B's roster")
        thread.start()
        rng = random.Random(7)
        for kill in range(20):
            wait_until(
                lambda k=kill: a_proc.output().count("running") > k,
                timeout_s=60,
                what=f"gateway A start #{kill + 1}",
            )
            time.sleep(rng.uniform(0.2, 1.5))  # somewhere in boot, join, consume, commit
            a_proc.kill9()
            a_proc.start()
        stop.set()
        thread.join(10)
        b_engine = make_engine(f"sqlite:///{tmp_path / 'B-inproc.sqlite'}", create=False)
        wait_until(
            lambda: _unsent(b_engine) == 0, timeout_s=60, what="B's relay to ship every reply"
        )
        a_engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}", create=False)
        wait_until(
            lambda: len(_held(a_engine)) >= len(sent), timeout_s=120, what="A to hold every reply"
        )
        time.sleep(2.0)  # a last redelivery window: duplicates would show up now
        held = [m for m, _ in _held(a_engine)]
        assert len(sent) > 500
        assert held == sent, "each acknowledged reply held exactly once, in send order"
    finally:
        stop.set()
        b.gateway.stop()


def _unsent(engine: Any) -> int:
    with engine.connect() as c:
        return len(list(c.execute(select(outbox.c.lsn).where(is_pending()))))


def _held(engine: Any) -> list[tuple[str, bytes]]:
    with engine.connect() as c:
        rows = c.execute(
            select(held_table.c.msg_id, held_table.c.body)
            .where(held_table.c.kind == "REPLY")
            .order_by(held_table.c.id)
        )
        return [(r.msg_id, bytes(r.body)) for r in rows]


def test_kill9_between_commit_and_inject_never_injects_and_fails_once(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """R-ACK-3 forward path: ack BEFORE inject. A crash in that window loses the inject
    visibly: never injected twice (here: never), and exactly one FAILED at the sender."""
    injected = tmp_path / "injected.txt"
    injected.touch()
    b_cfg = fleet.config_file("B", _worker_b(injected))
    crashing = GatewayProcess(b_cfg, tmp_path / "B1.log", env={"FLEET_FAULT": "crash_after_commit"})
    procs.append(crashing.start())
    a = _in_process(
        fleet,
        "A",
        tmp_path,
        (EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
        inject_deadline_s=8.0,
        clock_skew_s=2.0,  # the INJECT_TIMEOUT comes clock_skew_s past the signed deadline
    )
    a.gateway.start()
    try:
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=60, what="worker-b in A's roster")
        brief = a.client.send(sender="main-a", to="worker-b", body=b"do the thing")
        assert crashing.wait_exit(60) == 137, crashing.output()[-2000:]
        procs.append(GatewayProcess(b_cfg, tmp_path / "B2.log").start())  # restarted, no fault
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(m.kind == "FAILED" for m in got):
            got += a.client.poll("main-a")
            time.sleep(0.05)
        time.sleep(3.0)
        got += a.client.poll("main-a")
        from pipeline.envelope.receipts import read_receipt

        failed = [read_receipt("FAILED", m.body) for m in got if m.kind == "FAILED"]
        assert [f.msg_id for f in failed] == [brief.msg_id], got
        assert failed[0].reason == "INJECT_TIMEOUT"
        assert not [m for m in got if m.kind == "INJECTED"]
        assert brief.msg_id not in injected.read_text(), "committed, so never injected"
    finally:
        a.gateway.stop()


def test_same_host_twice_is_fenced_with_a_clear_exit(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """R-TOP-3 'a second gateway fails loudly' (static membership fencing); nothing is
    injected twice."""
    injected = tmp_path / "injected.txt"
    injected.touch()
    first = GatewayProcess(
        fleet.config_file("B", _worker_b(injected), store=f"sqlite:///{tmp_path / 'B1.sqlite'}"),
        tmp_path / "B1.log",
    )
    procs.append(first.start())
    a = _in_process(
        fleet, "A", tmp_path, (EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),)
    )
    a.gateway.start()
    try:
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=60, what="worker-b in A's roster")
        ids = [a.client.send(sender="main-a", to="worker-b", body=b"x").msg_id for _ in range(5)]
        wait_until(
            lambda: len(injected.read_text().split()) >= 5, timeout_s=30, what="first 5 injects"
        )
        second = GatewayProcess(
            fleet.config_file(
                "B", _worker_b(injected), store=f"sqlite:///{tmp_path / 'B2.sqlite'}"
            ),
            tmp_path / "B2.log",
        )
        procs.append(second.start())
        time.sleep(5)
        ids += [a.client.send(sender="main-a", to="worker-b", body=b"y").msg_id for _ in range(5)]
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(c == 3 for c in codes.values()):
            codes = {
                "first": first.proc.poll() if first.proc else None,
                "second": second.proc.poll() if second.proc else None,
            }
            time.sleep(0.2)
        loser = first if codes.get("first") == 3 else second
        assert 3 in codes.values(), (codes, first.output()[-1500:], second.output()[-1500:])
        assert "fenced" in loser.output().lower()
        time.sleep(8)
        lines = injected.read_text().split()
        assert len(lines) == len(set(lines)), "no brief injected twice"
        assert set(lines) <= set(ids)
    finally:
        a.gateway.stop()


def test_zombie_after_sigstop_injects_nothing_and_cannot_commit(
    fleet: Fleet, tmp_path: Path, procs: list[GatewayProcess]
) -> None:
    """R-TOP-4 exclusive-consumer caveat: a gateway stalled past its session timeout is
    replaced; when it wakes it injects nothing that arrived meanwhile, its late commits do not
    land (no brief is ever injected twice), and exactly one of the two stops loudly (fenced)."""
    zombie_log, fresh_log = tmp_path / "zombie.txt", tmp_path / "fresh.txt"
    zombie_log.touch()
    fresh_log.touch()
    zombie = GatewayProcess(
        fleet.config_file("B", _worker_b(zombie_log), store=f"sqlite:///{tmp_path / 'Bz.sqlite'}"),
        tmp_path / "Bz.log",
    )
    procs.append(zombie.start())
    a = _in_process(
        fleet, "A", tmp_path, (EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),)
    )
    a.gateway.start()
    try:
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=60, what="worker-b in A's roster")
        warm = a.client.send(sender="main-a", to="worker-b", body=b"warm").msg_id
        wait_until(
            lambda: warm in zombie_log.read_text(), timeout_s=30, what="zombie's first inject"
        )
        zombie.pause()
        time.sleep(12)  # past session.timeout.ms (10 s)
        fresh = GatewayProcess(
            fleet.config_file(
                "B", _worker_b(fresh_log), store=f"sqlite:///{tmp_path / 'Bf.sqlite'}"
            ),
            tmp_path / "Bf.log",
        )
        procs.append(fresh.start())
        ids = [a.client.send(sender="main-a", to="worker-b", body=b"z").msg_id for _ in range(5)]
        wait_until(
            lambda: set(ids) <= set(fresh_log.read_text().split()),
            timeout_s=60,
            what="the replacement injects the new briefs",
        )
        zombie.resume()
        # Static membership: the newest join with a group.instance.id wins. If the zombie's
        # session expired, its rejoin fences the replacement instead; either way exactly one of
        # the two stops loudly, and neither injects a brief twice.
        loser = None
        deadline = time.monotonic() + 60
        while loser is None and time.monotonic() < deadline:
            for p in (zombie, fresh):
                if p.proc is not None and p.proc.poll() == 3:
                    loser = p
            time.sleep(0.2)
        assert loser is not None, (zombie.output()[-1500:], fresh.output()[-1500:])
        assert "fenced" in loser.output().lower()
        assert sum(p.proc is not None and p.proc.poll() is None for p in (zombie, fresh)) == 1
        time.sleep(3)
        assert not set(ids) & set(zombie_log.read_text().split()), "the zombie injected nothing"
        more = [a.client.send(sender="main-a", to="worker-b", body=b"m").msg_id for _ in range(3)]
        wait_until(
            lambda: (
                set(more) <= set(zombie_log.read_text().split() + fresh_log.read_text().split())
            ),
            timeout_s=60,
            what="the surviving gateway injects new briefs",
        )
        time.sleep(2)
        every = zombie_log.read_text().split() + fresh_log.read_text().split()
        assert len(every) == len(set(every)), "no brief injected twice, late commits never landed"
    finally:
        a.gateway.stop()
