"""The FAILED reporter with the real, signing sink between two in-process gateways.

R-DLQ-4: "a DLQ consumer reports every dead-lettered forward brief back to its sender as
FAILED". Host A runs main-a (pull), host B runs worker-b (inject). B dead-letters A's briefs
through its outbox to ``<prefix>dlq``; the reporter, running as host B, turns each into a signed
FAILED that B's gateway relay ships to A's inbox, where it settles the forward-tracking row and
is held for main-a.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.bootstrap.reporters import build_failed_reporter
from pipeline.envelope.receipts import Receipt, read_receipt
from pipeline.failures.reporter import reported_table
from pipeline.host import deadlines, tracking
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.outbox import backlog
from pipeline.presence.roles import Delivery, Role
from pipeline.store import make_engine
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
B_MAX_TTL_S = 60  # B refuses briefs living longer: verified, then dead-lettered TTL_TOO_LONG

WORKER_B = """[[entities]]
gid = "worker-b"
role = "worker"
delivery = "inject"
[entities.injector]
type = "callback"
"""


@dataclass
class Hosts:
    fleet: Fleet
    a: GatewayParts
    b: GatewayParts
    b_config: GatewayConfig
    injected: list[str]


def _config(fleet: Fleet, root: Path, host: str, **kw: Any) -> GatewayConfig:
    return GatewayConfig(
        host=host,
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{root / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        key_file=str(root / f"{host}.key"),
        trust_dir=str(root / "trusted"),
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        **kw,
    )


def _hosts(kafka: BrokerHandle, tmp_path: Path, *, a_kw: Any, b_kw: Any) -> Iterator[Hosts]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B", "C"))  # C: a gateway-less reporter
    injected: list[str] = []
    main_a = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    worker_b = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    b_config = _config(fleet, tmp_path, "B", entities=(worker_b,), **b_kw)
    a = build_gateway(
        _config(fleet, tmp_path, "A", entities=(main_a,), **a_kw),
        signer=fleet.signers["A"],
        trust=fleet.trust,
    )
    b = build_gateway(
        b_config,
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": lambda *, msg_id, **_: injected.append(msg_id)},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=30, what="worker-b in A's roster")
        yield Hosts(fleet, a, b, b_config, injected)
    finally:
        a.gateway.stop()
        b.gateway.stop()


def held_failed(a: GatewayParts) -> list[tuple[str, str, Receipt]]:
    """Every FAILED ever held for main-a (drained or not): (held msgId, from, receipt)."""
    with a.engine.connect() as conn:
        rows = conn.execute(
            select(held_table.c.msg_id, held_table.c.sender, held_table.c.body).where(
                held_table.c.recipient == "main-a", held_table.c.kind == "FAILED"
            )
        ).all()
    return [(r.msg_id, r.sender, read_receipt("FAILED", bytes(r.body))) for r in rows]


def reported(b: GatewayParts) -> int:
    with b.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(reported_table)).scalar_one())


def pending_anytime(a: GatewayParts) -> list[Any]:
    """Tracked sends the deadline path could still report, however late it runs."""
    with a.client.sessions() as s:
        return deadlines.overdue(s, tracking.FORWARD, now=2**62, limit=10_000)


@pytest.fixture
def long_deadline(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    # A's deadline (min(expiresAt, ts + inject_deadline_s)) lies far beyond the test: every
    # FAILED main-a gets must come from the reporter
    yield from _hosts(
        kafka, tmp_path, a_kw={"inject_deadline_s": 3600}, b_kw={"max_ttl_s": B_MAX_TTL_S}
    )


@pytest.mark.slow
def test_reporter_killed_minus_9_yields_exactly_one_failed_per_dead_lettered_brief(
    long_deadline: Hosts, tmp_path: Path
) -> None:
    """R-DLQ-4: a DLQ consumer reports every dead-lettered forward brief back to its
    sender as FAILED -- exactly one each, none lost, with the reporter (``python -m pipeline dlq
    report --config``) killed -9 twice mid-way and restarted; and the sender's own deadline path
    never adds a second FAILED for the same brief."""
    h = long_deadline
    n = 300
    sent = [
        h.a.client.send(sender="main-a", to="worker-b", body=f"brief {i}".encode(), ttl_s=900)
        for i in range(n)
    ]
    by_id = {e.msg_id: e for e in sent}
    config = h.fleet.config_file(
        "B",
        WORKER_B,
        store=h.b_config.store_url,
        extra=f"max_ttl_s = {B_MAX_TTL_S}",
    )
    cmd = [sys.executable, "-m", "pipeline", "dlq", "report", "--config", str(config)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    kills = 0
    for round_, at_least in enumerate((40, 120)):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 90
            while reported(h.b) < at_least and time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        finally:
            proc.wait(timeout=30)
            if proc.stderr:
                proc.stderr.close()
        assert at_least <= reported(h.b) < n, f"round {round_}: the kill missed the work"
    done = subprocess.run(
        [*cmd, "--idle-exit", "5"], check=False, env=env, capture_output=True, timeout=240
    )
    assert done.returncode == 0, done.stderr.decode()
    assert reported(h.b) == n

    wait_until(lambda: len(held_failed(h.a)) >= n, timeout_s=60, what=f"{n} FAILED held for main-a")
    time.sleep(2.0)  # anything late (a re-emit, a relay resend) would land by now
    failed = held_failed(h.a)
    per_brief = Counter(r.msg_id for _, _, r in failed)
    assert set(per_brief) == set(by_id), "every dead-lettered brief, and only those"
    assert set(per_brief.values()) == {1}, "exactly one FAILED per brief"
    for held_id, sender, receipt in failed:
        assert held_id == f"failed-{receipt.msg_id}"
        assert sender == "B._gateway", "signed and sent by the reporting host"
        assert (receipt.stage, receipt.reason) == ("dlq", "TTL_TOO_LONG")
        assert receipt.recipient == "worker-b"
    assert h.injected == [], "a dead-lettered brief is never injected"
    with h.a.client.sessions() as s:
        states = {deadlines.state_of(s, tracking.FORWARD, m) for m in by_id}
    assert states == {tracking.FAILED}, "each FAILED settled its forward-tracking row"
    assert pending_anytime(h.a) == [], "the deadline path has nothing left to report"
    assert h.a.maintenance.deadlines() == 0
    assert len(held_failed(h.a)) == n


def test_reporter_on_a_host_without_gateway_ships_through_its_own_relay(
    long_deadline: Hosts, tmp_path: Path
) -> None:
    """R-DLQ-4 with ``--relay``: host C runs no gateway, only the reporter; its FAILEDs
    (signed by C) leave C's outbox through the relay inside the reporter, which drains before
    it exits."""
    h = long_deadline
    sent = [
        h.a.client.send(sender="main-a", to="worker-b", body=b"brief", ttl_s=900) for _ in range(20)
    ]
    config = h.fleet.config_file("C", "", store=f"sqlite:///{tmp_path / 'C-only.sqlite'}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "dlq",
            "report",
            "--config",
            str(config),
            "--relay",
            "--idle-exit",
            "5",
        ],
        check=False,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        capture_output=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr.decode()
    wait_until(
        lambda: len(held_failed(h.a)) >= len(sent), timeout_s=60, what="20 FAILED held for main-a"
    )
    failed = held_failed(h.a)
    assert Counter(r.msg_id for _, _, r in failed) == Counter({e.msg_id: 1 for e in sent})
    assert {sender for _, sender, _ in failed} == {"C._gateway"}
    c_store = make_engine(f"sqlite:///{tmp_path / 'C-only.sqlite'}")
    try:
        assert backlog(c_store)[0] == 0, "the reporter's relay drained C's outbox before exit"
    finally:
        c_store.dispose()


@pytest.fixture
def racing(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    # B allows no clock skew, so a brief of 1 ms is EXPIRED at delivery; A's deadline is the
    # same expiresAt: both paths report every brief
    yield from _hosts(kafka, tmp_path, a_kw={"inject_deadline_s": 3600}, b_kw={"clock_skew_s": 0})


def test_deadline_and_reporter_race_and_the_sender_still_sees_one_failed(
    racing: Hosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-ACK-5, R-DLQ-4: the sender's deadline FAILED and the reporter's FAILED for the same
    EXPIRED brief share msgId failed-<msgId>; whichever settles the tracking row first is the one
    FAILED main-a sees, the other is dropped (or, when both are in flight at once, the unique
    held row fails the later transaction, which re-reads and drops it).

    A's own deadline tick (every 0.5 s) would always beat the reporter's round trip, so the test
    drives the deadline path itself and releases it when half of the briefs were reported: the
    two paths then run at the same time over the rest."""
    h = racing
    n = 60
    deadlines = h.a.maintenance.deadlines
    monkeypatch.setattr(h.a.maintenance, "deadlines", lambda: 0)
    reporter = build_failed_reporter(h.b_config, signer=h.fleet.signers["B"], trust=h.fleet.trust)
    stop = threading.Event()
    threads = [threading.Thread(target=reporter.run, kwargs={"should_stop": stop.is_set})]
    threads[0].start()
    try:
        # (no consumer.assignment() here: calling the consumer from a second thread while
        # run() polls it can block)
        sent = [
            h.a.client.send(sender="main-a", to="worker-b", body=b"x", ttl_s=0.001)
            for _ in range(n)
        ]
        wait_until(
            lambda: reported(h.b) >= n // 2, timeout_s=90, what="half of the dead letters reported"
        )

        def deadline_path() -> None:
            while not stop.is_set():
                deadlines()
                time.sleep(0.005)

        threads.append(threading.Thread(target=deadline_path))
        threads[1].start()
        wait_until(lambda: reported(h.b) >= n, timeout_s=90, what=f"all {n} dead letters reported")
        wait_until(
            lambda: len(held_failed(h.a)) >= n, timeout_s=60, what=f"{n} FAILED held for main-a"
        )
        time.sleep(2.0)  # the losing path's copies have landed and been dropped by now
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        reporter.consumer.close()
        reporter.engine.dispose()
    failed = held_failed(h.a)
    assert Counter(r.msg_id for _, _, r in failed) == Counter({e.msg_id: 1 for e in sent})
    stages = Counter(r.stage for _, _, r in failed)
    assert set(stages) <= {"dlq", "timeout"}, stages
    print(f"FAILED by path: {dict(stages)}")  # which path won each brief varies run to run
    assert all(held_id == f"failed-{r.msg_id}" for held_id, _, r in failed)
    assert h.injected == []
    assert pending_anytime(h.a) == []
