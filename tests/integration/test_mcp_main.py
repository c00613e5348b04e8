"""A main over MCP on a real broker: host A's main is driven by the SDK's stdio client through
``python -m pipeline mcp``; host B's worker is an in-process gateway with a callback injector.

Each test names the requirement it checks (docs/requirements.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.host.config import load_config
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet
from tests.integration.test_gateway_flows import Recorder

pytestmark = pytest.mark.kafka

A_ENTITIES = """
[[entities]]
gid = "main-a"
role = "main"
delivery = "pull"

[[entities]]
gid = "main-a2"
role = "main"
delivery = "pull"
"""
A_GIDS = ("main-a", "main-a2")
B_ENTITIES = """
[[entities]]
gid = "worker-b"
role = "worker"
delivery = "inject"
[entities.injector]
type = "callback"
"""


@dataclass
class Hosts:
    a: GatewayParts
    b: GatewayParts
    rec: Recorder
    a_config: Path
    b_config: Path


@pytest.fixture
def hosts(kafka: BrokerHandle, tmp_path: Path) -> Iterator[Hosts]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    extra = "inject_deadline_s = 15.0"
    a_config = fleet.config_file("A", A_ENTITIES, extra=extra)
    b_config = fleet.config_file("B", B_ENTITIES, extra=extra)
    rec = Recorder()
    a = build_gateway(load_config(a_config), signer=fleet.signers["A"], trust=fleet.trust)
    b = build_gateway(
        load_config(b_config),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": rec},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        # every entity a test addresses: presence entries arrive one by one, and a B that knows
        # main-a may not know main-a2 yet (an ASK to it refused UNKNOWN_RECIPIENT, seen in CI)
        wait_until(
            lambda: a.client.knows("worker-b") and all(b.client.knows(g) for g in A_GIDS),
            timeout_s=30,
            what="presence",
        )
        yield Hosts(a, b, rec, a_config, b_config)
    finally:
        a.gateway.stop()
        b.gateway.stop()


@asynccontextmanager
async def main_session(config: Path, gid: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pipeline", "mcp", "--config", str(config), "--as", gid],
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    result: CallToolResult = await session.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def poll_until(
    session: ClientSession, want: Any, timeout: float = 30
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += (await call(session, "poll", wait_s=2.0))["messages"]
        if want(seen):
            return seen
    raise AssertionError(f"poll never satisfied the condition; saw {seen}")


def test_a_main_over_mcp_briefs_a_worker_and_reads_injected_and_the_reply(hosts: Hosts) -> None:
    """R-HOLD-4: a main is an MCP client; a send to a worker is injected, INJECTED comes
    back correlated to the msgId (rendered, structured), and the worker's reply reaches poll."""

    async def scenario() -> None:
        async with main_session(hosts.a_config, "main-a") as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            want = {"send", "ask", "answer", "abandon", "poll", "roster", "broadcast", "spawn"}
            assert want <= set(tools)
            assert tools["send"].input_schema["required"] == ["to", "body"]
            roster = await call(s, "roster")
            assert {"gid": "worker-b", "host": "B"}.items() <= next(
                e for e in roster["entries"] if e["gid"] == "worker-b"
            ).items()
            sent = await call(s, "send", to="worker-b", body="brief: build it")
            got = await poll_until(s, lambda ms: any(m["kind"] == "INJECTED" for m in ms))
            injected = next(m for m in got if m["kind"] == "INJECTED")
            assert injected["about"] == sent["msgId"] and injected["recipient"] == "worker-b"
            assert injected["body"] is None and sent["msgId"] in injected["text"]
            assert [r[3] for r in hosts.rec.of("worker-b", "SEND")] == [b"brief: build it"]
            hosts.b.client.send(sender="worker-b", to="main-a", kind=_reply(), body=b"built")
            got = await poll_until(s, lambda ms: any(m["kind"] == "REPLY" for m in ms))
            reply = next(m for m in got if m["kind"] == "REPLY")
            assert reply["body"] == "built" and reply["from"] == "worker-b"
            # an open send: the brief goes out and the call returns with the worker's answer
            replier = threading.Thread(target=reply_once, args=(hosts,))
            replier.start()
            opened = await call(s, "send", to="worker-b", body="second brief", wait_s=30.0)
            replier.join()
            assert [(m["kind"], m["body"]) for m in opened["replies"]] == [("REPLY", "again")]
            bad = await s.call_tool("send", {"to": "nobody-anywhere", "body": "x"})
            assert bad.is_error and bad.structured_content is not None
            assert bad.structured_content["error"]["reason"] == "UNKNOWN_RECIPIENT"
            # The MCP server's writes went through A's local socket (A's gateway
            # committed them), the refusal too, with the same reason code
            sample = hosts.a.registry.get_sample_value
            queued = sample("fleet_gateway_socket_requests_total",
                            {"kind": "SEND", "outcome": "queued"})  # fmt: skip
            assert queued == 2
            refused = sample("fleet_gateway_socket_refusals_total", {"reason": "UNKNOWN_RECIPIENT"})
            assert refused == 1
            nowhere = await s.call_tool("spawn", {"host": "nowhere", "profile": "shell"})
            assert nowhere.is_error and nowhere.structured_content is not None
            assert nowhere.structured_content["error"]["reason"] == "UNKNOWN_HOST"

    anyio.run(scenario)


def test_mcp_poll_is_the_open_pull_and_an_answer_after_abandon_is_too_late(hosts: Hosts) -> None:
    """R-CONV-2: a blocking MCP poll is an open pull (the ASK surfaces, no NO_WAITER);
    the asker abandons with ``fleet abandon``; the main's ANSWER then gets TOO_LATE."""
    asked: list[Any] = []

    def worker_asks() -> None:
        pull_open(hosts.a, "main-a")  # ask only once the MCP poll is registered as a waiter
        asked.append(hosts.b.client.ask(sender="worker-b", to="main-a", body=b"which db?"))

    async def scenario() -> None:
        async with main_session(hosts.a_config, "main-a") as s:
            t = threading.Thread(target=worker_asks)
            t.start()
            got = (await call(s, "poll", wait_s=30.0))["messages"]
            t.join()
            assert [m["kind"] for m in got] == ["ASK"] and got[0]["turnId"] == asked[0].turn_id
            assert got[0]["body"] == "which db?"
            turn = str(asked[0].turn_id)
            out = subprocess.run(
                [sys.executable, "-m", "pipeline", "abandon", "--config", str(hosts.b_config),
                 "--from", "worker-b", "--to", "main-a", "--turn", turn, "--json"],
                capture_output=True, check=True, text=True,
            )  # fmt: skip
            assert json.loads(out.stdout)["turnId"] == turn
            got = await poll_until(s, lambda ms: any(m["kind"] == "ABANDONED" for m in ms))
            assert "TOO_LATE" in next(m for m in got if m["kind"] == "ABANDONED")["text"]
            await call(s, "answer", to="worker-b", turn_id=turn, body="postgres")
            got = await poll_until(s, lambda ms: any(m["kind"] == "TOO_LATE" for m in ms))
            late = next(m for m in got if m["kind"] == "TOO_LATE")
            assert late["turnId"] == turn and late["reason"] == "TOO_LATE"
            assert hosts.rec.of("worker-b", "ANSWER") == [], "nothing injected after abandon"

    anyio.run(scenario)


def test_a_main_abandons_over_mcp_and_the_workers_late_answer_gets_too_late(
    hosts: Hosts,
) -> None:
    """R-CONV-2 from the other side: the main asks and abandons through MCP; the worker
    is told ABANDONED in words, and its late ANSWER comes back TOO_LATE into its pane."""

    async def scenario() -> None:
        async with main_session(hosts.a_config, "main-a") as s:
            asked = await call(s, "ask", to="worker-b", body="status?", ttl_s=60)
            wait_until(lambda: hosts.rec.of("worker-b", "ASK"), timeout_s=20, what="ASK injected")
            await call(s, "abandon", to="worker-b", turn_id=asked["turnId"])
            wait_until(
                lambda: hosts.rec.of("worker-b", "ABANDONED"),
                timeout_s=20,
                what="ABANDONED injected",
            )
            told = hosts.rec.of("worker-b", "ABANDONED")[0][3].decode()
            assert told.startswith("[fleet] ABANDONED") and asked["turnId"] in told
            hosts.b.client.answer(
                sender="worker-b", to="main-a", turn_id=asked["turnId"], body=b"green"
            )
            wait_until(
                lambda: hosts.rec.of("worker-b", "TOO_LATE"), timeout_s=20, what="TOO_LATE injected"
            )
            late = hosts.rec.of("worker-b", "TOO_LATE")[0][3].decode()
            assert late.startswith("[fleet] TOO_LATE") and asked["turnId"] in late
            got = (await call(s, "poll"))["messages"]
            assert [m for m in got if m["kind"] == "ANSWER"] == []

    anyio.run(scenario)


def test_no_waiter_and_ask_expiry_reach_the_worker_as_sentences(hosts: Hosts) -> None:
    """R-CONV-1, R-CONV-3: NO_WAITER names who was not listening and the turn; an ASK that expires
    unanswered ends the asker's turn with a FAILED(EXPIRED) notice it can read."""
    nw = hosts.b.client.ask(sender="worker-b", to="main-a2", body=b"anyone?")
    wait_until(
        lambda: hosts.rec.of("worker-b", "NO_WAITER"), timeout_s=20, what="NO_WAITER injected"
    )
    text = hosts.rec.of("worker-b", "NO_WAITER")[0][3].decode()
    assert text.startswith("[fleet] NO_WAITER") and "main-a2" in text and str(nw.turn_id) in text

    got: list[Any] = []
    puller = threading.Thread(target=lambda: got.extend(hosts.a.client.poll("main-a", wait_s=20)))
    puller.start()
    pull_open(hosts.a, "main-a")
    ask = hosts.b.client.ask(sender="worker-b", to="main-a", body=b"quick?", ttl_s=2.0)
    puller.join(25)
    assert [m.kind for m in got] == ["ASK"], "held for the open pull, then never answered"
    wait_until(
        lambda: hosts.rec.of("worker-b", "FAILED"), timeout_s=20, what="expiry notice injected"
    )
    notice = hosts.rec.of("worker-b", "FAILED")[0][3].decode()
    assert notice.startswith("[fleet] expired") and str(ask.turn_id) in notice


def test_broadcast_to_an_empty_group_is_counted_silence(hosts: Hosts) -> None:
    """R-TOP-5: ``mandatory`` is false only for BROADCAST -- an empty group is
    legal silence, not an error; the gateway counts it."""
    assert hosts.a.client.broadcast(sender="main-a", group="nobody-here", body=b"hi") == 0
    count = hosts.a.registry.get_sample_value("fleet_gateway_empty_broadcasts_total")
    assert count == 1


def reply_once(hosts: Hosts) -> None:
    wait_until(
        lambda: len(hosts.rec.of("worker-b", "SEND")) == 2, timeout_s=30, what="the second brief"
    )
    hosts.b.client.send(sender="worker-b", to="main-a", kind=_reply(), body=b"again")


def pull_open(parts: GatewayParts, gid: str) -> None:
    def registered() -> bool:
        with parts.client.reads() as s:
            return parts.client.conversations.has_open_pull(s, gid)

    wait_until(registered, timeout_s=20, what=f"an open pull of {gid}")


def _reply() -> Any:
    from pipeline.envelope import Kind

    return Kind.REPLY


def test_two_mains_on_one_gateway_each_drain_only_their_own(hosts: Hosts) -> None:
    """R-HOLD-4: N message-addressable MCP clients per gateway, each its own gid."""

    async def scenario() -> None:
        async with (
            main_session(hosts.a_config, "main-a") as one,
            main_session(hosts.a_config, "main-a2") as two,
        ):
            for gid in ("main-a", "main-a2"):
                hosts.b.client.send(sender="worker-b", to=gid, kind=_reply(), body=gid.encode())
            got_one = await poll_until(one, lambda ms: len(ms) >= 1)
            got_two = await poll_until(two, lambda ms: len(ms) >= 1)
            assert [(m["to"], m["body"]) for m in got_one] == [("main-a", "main-a")]
            assert [(m["to"], m["body"]) for m in got_two] == [("main-a2", "main-a2")]
            refused = await one.call_tool("send", {"to": "worker-b", "body": "x", "kind": "ASK"})
            assert refused.is_error, "the schema admits SEND and REPLY only"

    anyio.run(scenario)


def test_mcp_refuses_a_gid_that_is_not_a_local_pull_entity(hosts: Hosts) -> None:
    """``--as`` must name a local pull entity: a worker is not a main (CONFIG_INVALID)."""
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "mcp", "--config", str(hosts.b_config),
         "--as", "worker-b"],
        check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and "[CONFIG_INVALID]" in out.stderr
