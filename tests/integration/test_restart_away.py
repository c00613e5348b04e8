"""A restart is not a departure (R-PRES-7, R-ACK-2, R-ACK-3): real broker, gateways as
processes, everything through the ``fleet`` CLI as an operator would.

Host B is stopped with SIGTERM and started again (2 s later; and once 60 s later, past the
inject deadline) while main-a sends REPLYs to main-b and briefs to worker-b. No send may be
refused (B's entities are *away*, not gone); every REPLY is held once, in send order; every
brief is injected once or answered by exactly one FAILED, never both. Then ``fleet gateway
leave`` tombstones B's entities: the next send is refused ``UNKNOWN_RECIPIENT``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.chaos.gateway_process import GatewayProc
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
MAIN_B = '[[entities]]\ngid = "main-b"\nrole = "main"\ndelivery = "pull"\n'
INJECT_DEADLINE_S = 20.0


def _worker_b(log: Path) -> str:
    return (
        '[[entities]]\ngid = "worker-b"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {log}"]\ntimeout_s = 5.0\n'
    )


def fleet_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


def _json(*args: str) -> Any:
    return json.loads(fleet_cli(*args, "--json").stdout)


@pytest.fixture
def procs() -> Iterator[list[GatewayProc]]:
    started: list[GatewayProc] = []
    yield started
    for p in started:
        p.stop()


class Sender:
    """main-a's sends through ``fleet send``, alternating a REPLY to main-b and a brief to
    worker-b, until stopped; every outcome recorded."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.replies: list[str] = []  # bodies, in send order
        self.briefs: list[str] = []  # msgIds
        self.refused: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _one(self, to: str, kind: str, body: str) -> str | None:
        out = fleet_cli("send", "--config", str(self.config), "--from", "main-a", "--to", to,
                        "--kind", kind, body, "--json", check=False)  # fmt: skip
        if out.returncode != 0:
            self.refused.append(f"{to}: {out.stdout.strip()} {out.stderr.strip()[-300:]}")
            return None
        return str(json.loads(out.stdout)["msgId"])

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            if self._one("main-b", "REPLY", f"r{n}") is not None:
                self.replies.append(f"r{n}")
            if (mid := self._one("worker-b", "SEND", f"b{n}")) is not None:
                self.briefs.append(mid)
            n += 1
            time.sleep(0.1)


def _drain(config: Path, gid: str, into: list[dict[str, Any]]) -> None:
    got = _json("poll", "--config", str(config), "--as", gid, "--limit", "1000")
    into += got if isinstance(got, list) else got["messages"]


@pytest.mark.parametrize("down_s", [2.0, 60.0], ids=["back-in-2s", "back-in-60s"])
def test_a_sigterm_restart_refuses_no_send_and_delivers_each_once(
    kafka: BrokerHandle, tmp_path: Path, procs: list[GatewayProc], down_s: float
) -> None:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    injected = tmp_path / "injected.txt"
    injected.touch()
    cfg_a = fleet.config_file("A", MAIN_A, extra=f"inject_deadline_s = {INJECT_DEADLINE_S}")
    cfg_b = fleet.config_file("B", MAIN_B + _worker_b(injected))
    a, b = GatewayProc(cfg_a, tmp_path / "A.log"), GatewayProc(cfg_b, tmp_path / "B.log")
    procs += [a.start(), b.start()]

    def known_at_a() -> bool:
        live = {e["gid"] for e in _json("roster", "--config", str(cfg_a))["entries"]}
        return {"main-b", "worker-b"} <= live

    wait_until(known_at_a, timeout_s=120, what="B's entities live in A's roster")
    sender = Sender(cfg_a)
    sender.thread.start()
    time.sleep(4)
    assert b.stop() == 0  # SIGTERM: B announces its entities away
    away = _json("roster", "--config", str(cfg_a), "--all")["entries"]
    assert {e["gid"] for e in away} >= {"main-b", "worker-b"}, "still bound while away"
    time.sleep(down_s)
    b.start()
    wait_until(b.ready, timeout_s=120, what="B running again")
    time.sleep(4)
    sender.stop.set()
    sender.thread.join(timeout=120)
    assert sender.refused == [], "a restart is not a departure: no send refused"
    assert sender.replies and sender.briefs

    held_b: list[dict[str, Any]] = []
    wait_until(
        lambda: _drain(cfg_b, "main-b", held_b) or len(held_b) >= len(sender.replies),
        timeout_s=120,
        what="every REPLY held at B",
    )
    assert [m["body"] for m in held_b] == sender.replies, "each REPLY held once, in order"

    receipts: list[dict[str, Any]] = []

    def every_brief_ended() -> bool:
        _drain(cfg_a, "main-a", receipts)
        ended = {m["about"] for m in receipts if m["kind"] in ("INJECTED", "FAILED")}
        return set(sender.briefs) <= ended

    wait_until(every_brief_ended, timeout_s=INJECT_DEADLINE_S + 120, what="every brief ended")
    time.sleep(2)
    _drain(cfg_a, "main-a", receipts)
    ends = Counter((m["about"], m["kind"]) for m in receipts)
    lines = Counter(injected.read_text().split())
    for mid in sender.briefs:
        injected_once = ends[(mid, "INJECTED")] == 1 and lines[mid] == 1
        failed_once = ends[(mid, "FAILED")] == 1 and lines[mid] == 0
        assert injected_once != failed_once, (mid, ends[(mid, "INJECTED")],
                                              ends[(mid, "FAILED")], lines[mid])  # fmt: skip
        assert ends[(mid, "INJECTED")] + ends[(mid, "FAILED")] == 1, mid


def test_a_clean_stop_ships_the_receipt_of_the_inject_it_waited_for(
    kafka: BrokerHandle, tmp_path: Path, procs: list[GatewayProc]
) -> None:
    """R-ACK-5, R-PRES-7: a SIGTERM that lands during an inject lets the inject end, and its
    ``INJECTED`` reaches the sender while B is still down. Were it left in B's outbox until the
    next start, a restart longer than the sender's deadline would give that sender a
    ``FAILED`` for a brief that was injected (then a late ``INJECTED`` beside it)."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    started, injected = tmp_path / "started", tmp_path / "injected.txt"
    slow = (
        '[[entities]]\ngid = "worker-b"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "touch {started}; sleep 3; echo $FLEET_MSG_ID >> {injected}"]\n'
        "timeout_s = 10.0\n"
    )
    cfg_a = fleet.config_file("A", MAIN_A)
    cfg_b = fleet.config_file("B", MAIN_B + slow)
    b = GatewayProc(cfg_b, tmp_path / "B.log")
    procs += [GatewayProc(cfg_a, tmp_path / "A.log").start(), b.start()]
    wait_until(
        lambda: (
            "worker-b" in {e["gid"] for e in _json("roster", "--config", str(cfg_a))["entries"]}
        ),
        timeout_s=120,
        what="worker-b live at A",
    )
    sent = _json("send", "--config", str(cfg_a), "--from", "main-a", "--to", "worker-b",
                 "--kind", "SEND", "the last brief")  # fmt: skip
    wait_until(started.exists, timeout_s=60, what="the inject under way")
    assert b.stop() == 0  # SIGTERM mid-inject
    assert injected.read_text().split() == [sent["msgId"]], "the inject under way ended"

    receipts: list[dict[str, Any]] = []
    wait_until(
        lambda: _drain(cfg_a, "main-a", receipts) or any(m["kind"] == "INJECTED" for m in receipts),
        timeout_s=60,
        what="the INJECTED at A with B stopped",
    )
    assert [(m["kind"], m["about"]) for m in receipts] == [("INJECTED", sent["msgId"])]


def test_leave_tombstones_and_sends_are_then_refused(
    kafka: BrokerHandle, tmp_path: Path, procs: list[GatewayProc]
) -> None:
    """R-PRES-6: leaving for good is explicit. ``fleet gateway leave`` refuses while the gateway
    runs; once it stopped (away), it tombstones every entry of the host."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    cfg_a, cfg_b = fleet.config_file("A", MAIN_A), fleet.config_file("B", MAIN_B)
    b = GatewayProc(cfg_b, tmp_path / "B.log")
    procs += [GatewayProc(cfg_a, tmp_path / "A.log").start(), b.start()]
    wait_until(b.ready, timeout_s=120, what="B running")
    assert fleet_cli("gateway", "leave", "--config", str(cfg_b), check=False).returncode != 0
    wait_until(
        lambda: "main-b" in {e["gid"] for e in _json("roster", "--config", str(cfg_a))["entries"]},
        timeout_s=120,
        what="main-b live at A",
    )
    assert b.stop() == 0
    sent = fleet_cli("send", "--config", str(cfg_a), "--from", "main-a", "--to", "main-b",
                     "--kind", "REPLY", "while away")  # fmt: skip
    assert sent.returncode == 0
    left = _json("gateway", "leave", "--config", str(cfg_b))
    assert set(left["tombstoned"]) == {"main-b", "B._gateway"}

    def refused() -> bool:
        out = fleet_cli("send", "--config", str(cfg_a), "--from", "main-a", "--to", "main-b",
                        "--kind", "REPLY", "after leave", "--json", check=False)  # fmt: skip
        return out.returncode != 0 and "UNKNOWN_RECIPIENT" in out.stdout + out.stderr

    wait_until(refused, timeout_s=60, what="UNKNOWN_RECIPIENT after leave")
