"""A job's caps counted across every host (R-SPAWN-7, R-FAIL-8): the orchestrator that fans out
too wide, on the real broker, the three target gateways as processes.

Two mains on host A ask concurrently for three times the job's live cap, spread over hosts B, C
and D. Each launch is a real long-running process that leaves a pid file, so the job's live
workers are sampled (pids alive) all along, not inferred from answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.client import build_control_client
from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.control.client import ControlClient
from pipeline.envelope.receipts import read_receipt
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.support.processes import kill_recorded, recorded_pid
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CAP = 2
TARGETS = ("B", "C", "D")
MAINS = ("main-a", "main-b")


def _profile(pids: Path) -> str:
    launch = f"echo $$ > {pids}/{{gid}}.pid; exec sleep 300"
    return (
        f'[[profiles]]\nname = "sleeper"\nmax_live_per_job = {CAP}\nmax_spawns_per_job = 10\n'
        f'launch = ["sh", "-c", "{launch}"]\n'
        f'[profiles.injector]\ntype = "command"\ncommand = ["sh", "-c", "cat > /dev/null"]\n'
    )


def _alive(pids: Path) -> dict[str, int]:
    """gid -> pid of every launched worker whose process still runs."""
    out = {}
    for f in pids.glob("*.pid"):
        pid = recorded_pid(f)  # not a recycled pid: another test's process
        if pid is not None:
            out[f.stem] = pid
    return out


@dataclass
class Fanout:
    a: GatewayParts
    control: ControlClient
    pids: Path
    targets: dict[str, GatewayProc]


@pytest.fixture
def fanout(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Fanout]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", *TARGETS))
    pids = tmp_path / "pids"
    pids.mkdir()
    extra = "spawn_deadline_s = 60.0"
    targets = {
        h: GatewayProc(fleet.config_file(h, _profile(pids), extra=extra), tmp_path / f"{h}.log")
        for h in TARGETS
    }
    for proc in targets.values():
        proc.start()
    mains = tuple(EntityConfig(gid=g, role=Role.MAIN, delivery=Delivery.PULL) for g in MAINS)
    cfg = GatewayConfig(
        host="A",
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{tmp_path / 'A.sqlite'}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        spawn_deadline_s=60.0,
        entities=mains,
    )
    a = build_gateway(cfg, signer=fleet.signers["A"], trust=fleet.trust)
    a.gateway.start()
    control = build_control_client(cfg, signer=fleet.signers["A"], engine=a.engine)
    try:
        for h in TARGETS:
            wait_until(lambda h=h: a.client.knows(f"{h}._gateway"), timeout_s=90, what=f"{h} up")
        yield Fanout(a, control, pids, targets)
    finally:
        a.gateway.stop()
        for proc in targets.values():
            proc.stop()
        for f in pids.glob("*.pid"):
            kill_recorded(f)


def _answers(a: GatewayParts, want: int, got: dict[str, tuple[str, str]]) -> None:
    """Poll both mains until ``want`` answers in all; a second answer for a msgId fails."""
    deadline = time.monotonic() + 90
    while len(got) < want and time.monotonic() < deadline:
        for main in MAINS:
            for m in a.client.poll(main, kinds=["INJECTED", "FAILED"]):
                receipt = read_receipt(m.kind, m.body)
                assert receipt.msg_id not in got, f"a second answer for {receipt.msg_id}"
                got[receipt.msg_id] = (m.kind, receipt.reason)
        time.sleep(0.05)


class _Sampler(threading.Thread):
    """The most live workers of the job seen at once (pids alive), every 20 ms."""

    def __init__(self, pids: Path) -> None:
        super().__init__(daemon=True)
        self.pids, self.most, self.done = pids, 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.most = max(self.most, len(_alive(self.pids)))
            time.sleep(0.02)


def test_a_job_fanned_out_over_three_hosts_gets_exactly_its_cap_across_the_fleet(
    fanout: Fanout,
) -> None:
    """R-SPAWN-7 (R-FAIL-8): two mains ask at once for 3x the job's live cap over B, C and D:
    exactly the cap is admitted fleet-wide, every other SPAWN has one FAILED CAP_EXCEEDED, and
    the sampled live workers of the job never exceed the cap. A worker stopped gives its slot
    back: the next SPAWN of the job is admitted again (the release)."""
    f = fanout
    sampler = _Sampler(f.pids)
    sampler.start()
    requests: list[Any] = []

    def ask(main: str) -> None:
        for i in range(3 * CAP // len(MAINS)):
            host = TARGETS[(i + MAINS.index(main)) % len(TARGETS)]
            requests.append(
                f.control.spawn(
                    requester=main, host=host, profile="sleeper", job="fan", spawn_id=f"{main}-{i}"
                )
            )

    askers = [threading.Thread(target=ask, args=(m,)) for m in MAINS]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    assert len(requests) == 3 * CAP
    got: dict[str, tuple[str, str]] = {}
    _answers(f.a, len(requests), got)
    assert sorted(got) == sorted(r.msg_id for r in requests)
    admitted = [r for r in requests if got[r.msg_id] == ("INJECTED", "")]
    refused = [r for r in requests if got[r.msg_id] == ("FAILED", "CAP_EXCEEDED")]
    assert len(admitted) == CAP and len(refused) == 2 * CAP, got
    wait_until(lambda: len(_alive(f.pids)) == CAP, timeout_s=30, what="the admitted workers")
    time.sleep(1.0)  # a late launch of a refused spawn would show now
    assert sorted(_alive(f.pids)) == sorted(r.spawn_id for r in admitted)

    # the release: a stopped worker's slot comes back to the job (after its host reaps it)
    gone = admitted[0]
    requester = gone.spawn_id.rsplit("-", 1)[0]  # the spawn ids are <main>-<i>
    f.control.stop(requester=requester, gid=gone.spawn_id, host=gone.host)
    wait_until(lambda: gone.spawn_id not in _alive(f.pids), timeout_s=30, what="the stop")
    again: list[Any] = []
    answers: dict[str, tuple[str, str]] = {}

    def admitted_again() -> bool:
        i = len(again)
        req = f.control.spawn(
            requester="main-a", host=TARGETS[i % 3], profile="sleeper", job="fan",
            spawn_id=f"again-{i}",
        )  # fmt: skip
        again.append(req)
        _answers(f.a, len(answers) + 1, answers)
        return any(answers.get(r.msg_id) == ("INJECTED", "") for r in again)

    wait_until(admitted_again, timeout_s=60, interval_s=1.0, what="a slot given back")
    wait_until(lambda: len(_alive(f.pids)) == CAP, timeout_s=30, what="the new worker")
    sampler.done.set()
    sampler.join()
    assert sampler.most <= CAP, f"{sampler.most} live workers of the job at once (cap {CAP})"
