"""``fleet top`` driven in tmux, and ``fleet trace``, against two gateways as processes.

Host A runs ``main-a`` (pull) and ``worker-a`` (inject, a command injector); host B runs
``worker-b`` (inject) and refuses any TTL over 60 s. A's inject deadline is an hour, so a brief
from main-a to worker-b lives longer than B accepts: B dead-letters it (``TTL_TOO_LONG``) and the
DLQ reporter turns it into a FAILED for main-a (R-DLQ-4). Each test reads the stores the
gateways write, through the commands an operator types.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.chaos.gateway_process import GatewayProc
from pipeline.support.processes import fleet_env
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
B_MAX_TTL_S = 60
CAPTURE = os.environ.get("FLEET_TOP_CAPTURE")  # a folder to keep screens and trails in (docs)


def _keep(name: str, text: str) -> None:
    if CAPTURE:
        Path(CAPTURE, name).write_text(text)


def _worker(gid: str, log: Path) -> str:
    return (
        f'[[entities]]\ngid = "{gid}"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {log}"]\ntimeout_s = 5.0\n'
    )


@dataclass
class TwoHosts:
    a: Path
    b: Path
    injected_log: Path
    bootstrap: str
    prefix: str

    def fleet(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", *args],
            env=fleet_env({"COLUMNS": "200"}),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert done.returncode == 0, done.stderr + done.stdout
        return done

    def send(self, config: Path, sender: str, to: str, *extra: str) -> tuple[str, str]:
        """``(msgId, traceId)`` as ``fleet send --json`` prints them."""
        out = self.fleet("send", "-c", str(config), "--from", sender, "--to", to, "--json", *extra)
        sent = json.loads(out.stdout)
        return str(sent["msgId"]), str(sent["traceId"])

    def snapshot(self) -> dict[str, Any]:
        out = self.fleet("top", "-c", str(self.a), "-c", str(self.b), "--once", "--json")
        return dict(json.loads(out.stdout))

    def trail(self, msg_id: str) -> dict[str, Any]:
        out = self.fleet("trace", msg_id, "-c", str(self.a), "-c", str(self.b), "--json")
        return dict(json.loads(out.stdout))


def _entity(snap: dict[str, Any], gid: str) -> dict[str, Any]:
    return next(e for e in snap["entities"] if e["gid"] == gid)


@pytest.fixture(scope="module")
def hosts(kafka: BrokerHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    root = tmp_path_factory.mktemp("top")
    fleet = Fleet.create(root, kafka.bootstrap, ("A", "B"))
    injected = root / "injected.log"
    a = fleet.config_file(
        "A", MAIN_A + _worker("worker-a", injected), extra="inject_deadline_s = 3600"
    )
    b = fleet.config_file("B", _worker("worker-b", injected), extra=f"max_ttl_s = {B_MAX_TTL_S}")
    procs = [GatewayProc(a, root / "A.log").start(), GatewayProc(b, root / "B.log").start()]
    two = TwoHosts(a=a, b=b, injected_log=injected, bootstrap=kafka.bootstrap, prefix=fleet.prefix)
    try:
        for p in procs:
            wait_until(p.ready, timeout_s=90, what=f"{p.config.stem} running")

        def both_live() -> bool:
            snap = two.snapshot()
            return all(_entity(snap, g)["live"] for g in ("main-a", "worker-a", "worker-b"))

        wait_until(both_live, timeout_s=60, what="main-a and worker-b live in the roster")
        yield two
    finally:
        for p in procs:
            p.stop()


# -- fleet top in tmux ------------------------------------------------------------------------


@dataclass
class Tmux:
    socket: str
    session: str = "top"

    @property
    def pane(self) -> str:
        return f"{self.session}:0.0"

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.pane, *keys)

    def run(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return done.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.pane)

    def wait(self, what: str, ready: Callable[[str], bool]) -> str:
        seen = [""]

        def check() -> bool:
            seen[0] = self.screen()
            return ready(seen[0])

        try:
            wait_until(check, timeout_s=30, what=what, interval_s=0.2)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; screen:\n{seen[0]}") from None
        return seen[0]


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux(unique_name("fleet-top").replace(".", "-"))
    yield server
    subprocess.run(["tmux", "-L", server.socket, "kill-server"], check=False, capture_output=True)


def _row(screen: str, gid: str) -> list[str]:
    """The cells of the entities table's row for ``gid`` (box characters dropped)."""
    for line in screen.splitlines():
        cells = _cells(line)
        if gid in cells and len(cells) >= 8:
            return cells
    return []


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[│┃|]", line) if c.strip()]


def _order(screen: str) -> list[str]:
    """The gids of the entities table, top to bottom."""
    gids = {"A._gateway", "B._gateway", "main-a", "worker-a", "worker-b"}
    rows = [_cells(line) for line in screen.splitlines()]
    return [cells[1] for cells in rows if len(cells) >= 8 and cells[1] in gids]


def test_top_in_tmux_shows_both_hosts_and_a_held_count_that_moves(
    hosts: TwoHosts, tmux: Tmux
) -> None:
    """The live view over a real terminal: both hosts current (not STALE), both entities with
    their counts; a REPLY to main-a raises its held count on screen; the filter, host and
    clear keys change what is shown; ``q`` quits and gives the terminal back."""
    _start(tmux, "top", "-c", str(hosts.a), "-c", str(hosts.b))
    first = tmux.wait(
        "both hosts and entities", lambda s: bool(_row(s, "main-a")) and bool(_row(s, "worker-b"))
    )
    assert "current" in first and "STALE" not in first
    held_before = int(_row(first, "main-a")[5])
    assert _row(first, "main-a")[:5] == ["A", "main-a", "main", "pull", "yes"]
    assert _row(first, "worker-b")[:5] == ["B", "worker-b", "worker", "inject", "yes"]

    hosts.send(hosts.b, "worker-b", "main-a", "--kind", "REPLY", "top: the reply")
    after = tmux.wait(
        "main-a's held count to grow",
        lambda s: len(_row(s, "main-a")) > 5 and _row(s, "main-a")[5] == str(held_before + 1),
    )
    _keep("top.txt", after)

    for key in ("/", "worker", "Enter"):
        tmux.keys(key)
    filtered = tmux.wait("the filter to hide main-a", lambda s: not _row(s, "main-a"))
    assert _row(filtered, "worker-b") and "filter 'worker'" in filtered

    tmux.keys("c")
    cleared = tmux.wait("clear to bring main-a back", lambda s: bool(_row(s, "main-a")))
    assert _order(cleared)[0] == "A._gateway", "by host, then gid"
    tmux.keys("s", "s")  # host -> gid -> held, biggest first
    by_held = tmux.wait("the sort by held", lambda s: "sort held desc" in s)
    assert _order(by_held)[0] == "main-a", "the one entity holding mail comes first"
    tmux.keys("h")  # one host at a time: A first
    one = tmux.wait("host A alone", lambda s: "host A" in s and not _row(s, "worker-b"))
    assert _row(one, "main-a")

    tmux.keys("q")
    tmux.wait("q to quit", lambda s: "entities" not in s)


def _start(tmux: Tmux, *args: str) -> None:
    env = fleet_env()
    command = " ".join([sys.executable, "-m", "pipeline", *args])
    subprocess.run(
        ["tmux", "-L", tmux.socket, "-f", "/dev/null", "new-session", "-d", "-s", tmux.session,
         "-x", "160", "-y", "50",
         # the pane's size, said outright: a CI run drew this table 80 wide (group names cut)
         f"env COLUMNS=160 LINES=50 PYTHONPATH={env['PYTHONPATH']} {command}; sleep 30"],
        check=True, env={k: v for k, v in env.items() if k != "TMUX"}, timeout=10,
    )  # fmt: skip


def test_lag_and_roster_watch_redraw_until_q(hosts: TwoHosts, tmux: Tmux) -> None:
    """The one-table live views: ``fleet lag --watch`` shows the gateway groups and quits on
    ``q``; ``fleet roster --watch --config`` shows that gateway's current view."""
    # A's inbox group has a committed offset only once A took a message: send it one here, so
    # the row does not depend on which test of this module ran first
    hosts.send(hosts.b, "worker-b", "main-a", "--kind", "REPLY", "lag: the reply")
    _start(tmux, "lag", "--watch", "-b", hosts.bootstrap, "--groups-prefix", hosts.prefix)
    tmux.wait("the gateway group's lag row", lambda s: f"{hosts.prefix}gw.A" in s)
    tmux.keys("q")
    tmux.wait("q to quit", lambda s: "fleet lag" not in s)
    tmux.session = "roster"  # a second session: the server lives on
    printed = hosts.fleet("roster", "--config", str(hosts.a)).stdout  # without --watch: once
    assert "roster as seen by A: current" in printed and "worker-b" in printed
    _start(tmux, "roster", "--watch", "--config", str(hosts.a))
    screen = tmux.wait("A's roster view", lambda s: "worker-b" in s and "main-a" in s)
    assert "current" in screen and "STALE" not in screen
    tmux.keys("q")
    tmux.wait("q to quit", lambda s: "worker-b" not in s)


def test_once_json_is_the_documented_snapshot(hosts: TwoHosts) -> None:
    """``fleet top --once --json``: the schema docs/observability.md documents."""
    snap = hosts.snapshot()
    assert snap["schema"] == 1 and snap["broker_ok"] is True
    assert set(snap) == {
        "schema", "taken_at", "broker_ok", "hosts", "entities", "groups", "pools", "dlq", "errors"
    }  # fmt: skip
    by_host = {h["host"]: h for h in snap["hosts"]}
    assert set(by_host) == {"A", "B"}
    groups = {g["group"]: g for g in snap["groups"]}
    assert by_host["A"]["entities"] == 3 and by_host["B"]["entities"] == 2, "with the gateways"
    for name, h in by_host.items():
        assert h["source"] == "store" and h["stale"] is False and h["why"] == ""
        assert isinstance(h["outbox_backlog"], int) and isinstance(h["quarantined_keys"], int)
        group = next((g for g in groups if g.endswith(f".gw.{name}")), None)
        assert h["lag"] == (groups[group]["lag"] if group else None), "its gateway's group"
    main = _entity(snap, "main-a")
    assert (main["host"], main["role"], main["delivery"], main["live"]) == (
        "A",
        "main",
        "pull",
        True,
    )
    assert all(isinstance(main[k], int) for k in ("held", "in_flight", "injecting"))
    assert snap["dlq"] is not None and snap["dlq"]["topic"].endswith("dlq")


# -- fleet trace ------------------------------------------------------------------------------


def _whats(trail: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["where"], e["what"]) for e in trail["events"]]


def test_trace_of_a_delivered_reply(hosts: TwoHosts) -> None:
    """A REPLY from worker-b to main-a: B's outbox row and its relay, A's receipt and hold,
    and the drain once main-a polls; all under the one trace id ``fleet send`` printed."""
    msg, trace = hosts.send(hosts.b, "worker-b", "main-a", "--kind", "REPLY", "trace: delivered")
    wait_until(
        lambda: ("A", "held") in _whats(hosts.trail(msg)), timeout_s=60, what="the reply held"
    )
    hosts.fleet("poll", "-c", str(hosts.a), "--as", "main-a")
    trail = hosts.trail(msg)
    whats = _whats(trail)
    assert whats.index(("A", "held")) < whats.index(("A", "drained"))
    # the relay records the broker's confirmation when its ack comes back: that can follow A's
    # receipt, so only the outbox row is ordered before the hold
    assert whats.index(("B", "outbox")) < whats.index(("B", "relay"))
    assert (
        whats.index(("B", "outbox")) < whats.index(("A", "received")) <= whats.index(("A", "held"))
    )
    assert re.fullmatch(r"[0-9a-f]{32}", trace) and trail["trace_id"] == trace, trail
    assert trail["trace_ids"] == [trace]
    text = hosts.fleet("trace", msg, "-c", str(hosts.a), "-c", str(hosts.b)).stdout
    assert f"traceId {trail['trace_id']}" in text and "held for main-a" in text


def test_trace_of_an_injected_brief(hosts: TwoHosts) -> None:
    """A brief to an inject-mode worker: the outbox row and tracked deadline, the journal
    opened and closed ``injected``, the INJECTED receipt staged and held for main-a."""
    msg, trace = hosts.send(hosts.a, "main-a", "worker-a", "--ttl", "30", "trace: injected")

    def receipt_held() -> bool:
        return any(
            e["where"] == "A" and e["what"] == "held" and "INJECTED" in e["detail"]
            for e in hosts.trail(msg)["events"]
        )

    wait_until(receipt_held, timeout_s=60, what="INJECTED held for main-a")
    trail = hosts.trail(msg)
    details = [f"{e['where']} {e['what']} {e['detail']}" for e in trail["events"]]
    assert any(
        d.startswith("A tracked") and " on A," in d and d.endswith("now injected") for d in details
    ), details  # the host the brief went to, whose INJECTED alone settles it
    assert any(d.startswith("A inject inject journal closed: injected") for d in details), details
    assert any(d.startswith("A outbox INJECTED") for d in details), details
    assert msg in hosts.injected_log.read_text()
    assert trail["trace_ids"] == [trace], "the receipt carries the brief's trace"
    _keep(
        "trace-injected.txt",
        hosts.fleet("trace", msg, "-c", str(hosts.a), "-c", str(hosts.b)).stdout,
    )


def test_trace_of_a_dead_lettered_brief(hosts: TwoHosts) -> None:
    """R-DLQ-4: a brief B refuses (TTL over its max) is dead-lettered; the reporter's row at B
    and the FAILED held for main-a at A both show in the trail."""
    msg, _ = hosts.send(hosts.a, "main-a", "worker-b", "--ttl", str(B_MAX_TTL_S * 10), "too long")
    wait_until(lambda: hosts.snapshot()["dlq"]["depth"] >= 1, timeout_s=60, what="the dead letter")
    hosts.fleet("dlq", "report", "--config", str(hosts.b), "--idle-exit", "5")

    def failed_held() -> bool:
        return any(
            e["where"] == "A" and e["what"] == "held" and "FAILED" in e["detail"]
            for e in hosts.trail(msg)["events"]
        )

    wait_until(failed_held, timeout_s=60, what="FAILED held for main-a")
    trail = hosts.trail(msg)
    dlq = [e for e in trail["events"] if e["what"] == "dlq"]
    assert len(dlq) == 1 and dlq[0]["where"] == "B" and "TTL_TOO_LONG" in dlq[0]["detail"]
    held = next(e for e in trail["events"] if e["what"] == "held" and "FAILED" in e["detail"])
    assert f"failed-{msg}" in held["detail"] and "reason TTL_TOO_LONG" in held["detail"]
    _keep("trace-dlq.txt", hosts.fleet("trace", msg, "-c", str(hosts.a), "-c", str(hosts.b)).stdout)
    with contextlib.suppress(FileNotFoundError):
        assert msg not in hosts.injected_log.read_text(), "a dead letter is never injected"
