"""End to end: a main over MCP spawns a worker on another host, briefs
it, and reads ``INJECTED`` and the worker's reply through ``poll``.

Everything is a real process: both gateways (``python -m pipeline gateway run``), the main's
MCP server (``python -m pipeline mcp``, driven by the SDK's stdio client) and the worker, which
B's gateway launches from its profile. The worker is a tiny script: it waits for its first
brief (its command injector appends briefs to a file) and answers with ``python -m pipeline
send --from <its gid>`` -- so its reply only leaves if a spawned worker is a local sender of
its host (R-ENV-7: a gateway signs for its own entities, spawned ones included).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession

from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet
from tests.integration.test_mcp_main import call, main_session, poll_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WORKER = """
import subprocess, sys, time
from pathlib import Path

gid, config, inbox, log = sys.argv[1:5]
deadline = time.monotonic() + 120
while time.monotonic() < deadline and not (Path(inbox).exists() and Path(inbox).read_text()):
    time.sleep(0.1)
brief = Path(inbox).read_text() if Path(inbox).exists() else "(no brief)"
out = subprocess.run(
    [sys.executable, "-m", "pipeline", "send", "--config", config, "--from", gid,
     "--to", "main-a", "--kind", "REPLY", "done: " + brief],
    capture_output=True, text=True,
)
Path(log).write_text(f"rc={out.returncode}\\n{out.stdout}\\n{out.stderr}")
"""

MAIN = """
[[entities]]
gid = "main-a"
role = "main"
delivery = "pull"
"""


def _profile(worker: Path, b_config: Path, runs: Path) -> str:
    launch = [sys.executable, str(worker), "{gid}", str(b_config), f"{runs}/{{gid}}.in",
              f"{runs}/{{gid}}.log"]  # fmt: skip
    argv = ", ".join(f'"{part}"' for part in launch)
    return (
        f'[[profiles]]\nname = "replier"\ndescription = "answers its first brief"\n'
        f"launch = [{argv}]\n"
        f'[profiles.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "cat >> {runs}/{{gid}}.in"]\n'
    )


@dataclass
class Hosts:
    a_config: Path
    runs: Path
    b: GatewayProcess


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    extra = "inject_deadline_s = 30.0\nspawn_deadline_s = 60.0"
    a_config = fleet.config_file("A", MAIN, extra=extra)
    b_config = tmp_path / "B-0.toml"  # the name config_file gives B's first file
    assert fleet.config_file("B", _profile(worker, b_config, runs), extra=extra) == b_config
    a = GatewayProcess(a_config, tmp_path / "A.log").start()
    b = GatewayProcess(b_config, tmp_path / "B.log").start()
    try:
        yield Hosts(a_config, runs, b)
    finally:
        a.stop()
        b.stop()


def test_a_main_over_mcp_spawns_a_worker_briefs_it_and_reads_injected_and_its_reply(
    hosts: Hosts,
) -> None:
    """R-SPAWN-3, R-HOLD-4: spawn on B through MCP -> INJECTED for the
    SPAWN; a brief to the new gid -> INJECTED for the brief; the worker's REPLY, sent by the
    worker's own process under its spawned gid, reaches the main's poll. Structured fields."""

    async def scenario() -> None:
        async with main_session(hosts.a_config, "main-a") as s:
            await _until_in_roster(s, "B._gateway")
            spawned = await call(s, "spawn", host="B", profile="replier", spawn_id="w-mcp")
            assert (spawned["spawnId"], spawned["host"]) == ("w-mcp", "B")
            got = await poll_until(s, lambda ms: _about(ms, spawned["msgId"]), timeout=60)
            outcome = _about(got, spawned["msgId"])
            assert outcome is not None and outcome["kind"] == "INJECTED", got
            assert outcome["recipient"] == "w-mcp" and outcome["from"] == "B._gateway"
            await _until_in_roster(s, "w-mcp")
            brief = await call(s, "send", to="w-mcp", body="brief: count to three")
            got = await poll_until(
                s,
                lambda ms: _about(ms, brief["msgId"]) and any(m["kind"] == "REPLY" for m in ms),
                timeout=60,
            )
            injected = _about(got, brief["msgId"])
            assert injected is not None and injected["kind"] == "INJECTED", got
            assert injected["recipient"] == "w-mcp" and brief["msgId"] in str(injected["text"])
            (reply,) = [m for m in got if m["kind"] == "REPLY"]
            assert (reply["from"], reply["to"]) == ("w-mcp", "main-a")
            assert reply["body"] == "done: brief: count to three"
            assert [m["kind"] for m in got if m["kind"] == "FAILED"] == []

    try:
        anyio.run(scenario)
    except BaseException:
        log = hosts.runs / "w-mcp.log"
        print("worker:", log.read_text() if log.exists() else "(no log)")
        print("B:", hosts.b.output()[-3000:])
        raise


def _about(messages: list[dict[str, object]], msg_id: str) -> dict[str, object] | None:
    """The receipt (INJECTED or FAILED) about ``msg_id``, if it came."""
    return next((m for m in messages if m.get("about") == msg_id), None)


async def _until_in_roster(session: ClientSession, gid: str, timeout: float = 60) -> None:
    deadline = anyio.current_time() + timeout
    while anyio.current_time() < deadline:
        entries = (await call(session, "roster"))["entries"]
        if any(e["gid"] == gid for e in entries):
            return
        await anyio.sleep(0.2)
    raise AssertionError(f"{gid} never showed in the main's roster")
