"""``fleet mcp --as GID``: one main (a pull entity) speaking MCP over stdio.

R-HOLD-4: a main is an MCP client of its host's gateway; several mains share one
gateway, each its own gid (one server process per main). Every tool is a thin call into
:class:`~pipeline.gateway.client.GatewayClient` -- the same code ``fleet send|ask|poll`` runs
(its writes through the gateway's local socket while one answers, :mod:`pipeline.gateway.socket_first`):

* ``poll`` with ``wait_s > 0`` **is** the open pull: it registers a waiter row in the store, so
  an ASK arriving meanwhile surfaces here instead of getting ``NO_WAITER``;
* results are structured (``structuredContent``) with one readable sentence per message in the
  text content, both from :mod:`pipeline.gateway.render`;
* a :class:`~pipeline.errors.FleetError` becomes an error result whose structured content is
  ``{"error": {"reason", "retriable", "message"}}`` -- the reason codes are the public ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from pipeline.control import ControlClient
from pipeline.control.socket_first import SocketFirstControl
from pipeline.envelope import Kind
from pipeline.errors import FleetError
from pipeline.gateway import render
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.socket_first import SocketFirst

from .lifecycle_tools import add_stop_and_workers

MAX_WAIT_S = 300.0
INSTRUCTIONS = (
    "You are {gid}, a main on the fleet messaging fabric. send/ask/answer/abandon/broadcast queue "
    "messages; poll reads what waits for you (receipts INJECTED/FAILED, replies, ASKs). Call poll "
    "with wait_s > 0 to listen: only then can a worker's ASK reach you (else it gets NO_WAITER)."
)

Gid = Annotated[str, Field(description="A recipient's global id (see the roster tool).")]
Body = Annotated[str, Field(description="The message text (UTF-8).")]
Turn = Annotated[str, Field(description="The turnId of the ASK this is about.")]
TraceId = Annotated[
    str | None,
    Field(description="Continue this trace (a traceId); default: the server's FLEET_TRACE_ID."),
]


def ok(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def failed(exc: FleetError) -> CallToolResult:
    error = {"reason": exc.reason, "retriable": exc.retriable, "message": str(exc)}
    return CallToolResult(
        content=[TextContent(type="text", text=str(exc))],
        structured_content={"error": error},
        is_error=True,
    )


def _reasoned(fn: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return fn(*args, **kwargs)
        except FleetError as exc:
            return failed(exc)

    return wrapper


def build_server(
    client: GatewayClient,
    *,
    gid: str,
    control: ControlClient | SocketFirstControl | None = None,
    extra_tools: Callable[[MCPServer], None] | None = None,
    writer: SocketFirst | None = None,
    trace_default: str | None = None,
) -> MCPServer:
    """The MCP server for main ``gid``; ``control`` adds the lifecycle tools ``spawn``,
    ``stop`` and ``workers``; ``writer`` sends through the host's gateway socket while one
    answers (else, and by default, ``client`` writes the store). ``trace_default``: the trace
    a ``send`` without ``trace_id`` continues (``FLEET_TRACE_ID`` of the server's environment,
    read by the entry point); an ``answer`` continues its ASK's."""
    w: SocketFirst | GatewayClient = client if writer is None else writer
    server: MCPServer = MCPServer("fleet", instructions=INSTRUCTIONS.format(gid=gid))

    def tool(description: str) -> Callable[[Callable[..., CallToolResult]], Any]:
        return lambda fn: server.tool(description=description)(_reasoned(fn))

    @tool("Send a message (a brief to a worker, a reply to a main). Returns its msgId; a "
          "worker's gateway answers with INJECTED or FAILED, which poll shows. With wait_s > 0 "
          "this is an open send: it also waits that long for the recipient's first message "
          "back and returns it in replies.")  # fmt: skip
    def send(
        to: Gid,
        body: Body,
        ttl_s: Annotated[float | None, Field(gt=0, description="Seconds until it expires.")] = None,
        kind: Annotated[str, Field(pattern="^(SEND|REPLY)$")] = "SEND",
        wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = 0.0,
        trace_id: TraceId = None,
    ) -> CallToolResult:
        env = w.send(sender=gid, to=to, body=body.encode(), kind=Kind(kind), ttl_s=ttl_s,
                     trace_id=trace_id or trace_default)  # fmt: skip
        data: dict[str, Any] = {"msgId": env.msg_id, "traceId": env.trace_id, "to": to}
        data["kind"] = kind
        text = f"queued {kind} {env.msg_id} to {to}"
        if wait_s > 0:  # R-HOLD-2: resolve an open send: an open pull filtered on `to`
            got = client.poll(gid, sender=to, wait_s=wait_s)
            data["replies"] = [render.held_dict(m) for m in got]
            text = "\n".join([text, *(render.held_line(m) for m in got)])
            if not got:
                text += f"\nno message from {to} within {wait_s:g}s (poll later)"
        return ok(text, data)

    @tool("Ask another entity a question; its answer comes back through poll while the turn "
          "waits. Returns the turnId.")  # fmt: skip
    def ask(
        to: Gid, body: Body, ttl_s: Annotated[float, Field(gt=0, le=86400)] = 120.0
    ) -> CallToolResult:
        env = w.ask(sender=gid, to=to, body=body.encode(), ttl_s=ttl_s, trace_id=trace_default)
        data = {"msgId": env.msg_id, "turnId": env.turn_id, "to": to}
        return ok(f"asked {to}: turn {env.turn_id}", data)

    @tool("Answer a worker's ASK (from poll: its from and turnId). If the worker's turn has "
          "ended, poll later shows TOO_LATE.")  # fmt: skip
    def answer(to: Gid, turn_id: Turn, body: Body, trace_id: TraceId = None) -> CallToolResult:
        env = w.answer(sender=gid, to=to, turn_id=turn_id, body=body.encode(), trace_id=trace_id)
        return ok(f"answered turn {turn_id}", {"msgId": env.msg_id, "turnId": turn_id, "to": to})

    @tool("Give up a turn you asked: the other side is told ABANDONED, and a late answer is "
          "refused with TOO_LATE.")  # fmt: skip
    def abandon(to: Gid, turn_id: Turn) -> CallToolResult:
        env = w.abandon(sender=gid, to=to, turn_id=turn_id)
        return ok(f"abandoned turn {turn_id}", {"msgId": env.msg_id, "turnId": turn_id, "to": to})

    @tool("Send one message to every live member of a group (all = everyone). A group with "
          "no live member is silence: hosts is 0.")  # fmt: skip
    def broadcast(
        group: Annotated[str, Field(description="Group name, or all.")], body: Body
    ) -> CallToolResult:
        hosts = client.broadcast(sender=gid, group=group, body=body.encode())
        return ok(f"broadcast to {group} on {hosts} host(s)", {"group": group, "hosts": hosts})

    @tool("Read what waits for you: replies, ASKs, receipts (INJECTED, FAILED, NO_WAITER, "
          "TOO_LATE, ABANDONED), each decoded. With wait_s > 0 this is an open pull: it "
          "blocks until something arrives, and ASKs can reach you meanwhile.")  # fmt: skip
    def poll(
        wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = 0.0,
        from_gid: Annotated[str | None, Field(description="Only from this sender.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> CallToolResult:
        got = client.poll(gid, sender=from_gid, limit=limit, wait_s=wait_s)
        lines = [render.held_line(m) for m in got] or ["nothing waiting"]
        return ok("\n".join(lines), {"messages": [render.held_dict(m) for m in got]})

    @tool("Who is live on the fabric: gid, host, role, delivery, groups.")
    def roster() -> CallToolResult:
        entries = [
            {"gid": e.gid, "host": e.host, "role": e.role, "delivery": e.delivery,
             "groups": list(e.groups)}
            for e in client.roster()
        ]  # fmt: skip
        text = "\n".join(f"{e['gid']} on {e['host']} ({e['role']}, {e['delivery']})"
                         for e in entries) or "nobody live"  # fmt: skip
        return ok(text, {"entries": entries})

    if control is not None:

        @tool("Spawn a worker on a live host with one of its profiles (see roster: the host's "
              "_gateway entry). Returns spawnId, the new worker's gid; the outcome arrives "
              "through poll (a FAILED with the reason when it is refused or times out).")  # fmt: skip
        def spawn(
            host: Annotated[str, Field(description="Target host id.")],
            profile: Annotated[str, Field(description="A profile that host advertises.")],
            brief: Annotated[str | None, Field(description="First brief for the worker.")] = None,
            spawn_id: Annotated[str | None, Field(description="The new gid (else minted).")] = None,
            job: Annotated[str | None, Field(description="Job id, for the caps.")] = None,
        ) -> CallToolResult:
            req = control.spawn(
                requester=gid, host=host, profile=profile, spawn_id=spawn_id, job=job, brief=brief
            )
            data = {"spawnId": req.spawn_id, "msgId": req.msg_id, "host": req.host,
                    "profile": req.profile, "deadlineMs": req.deadline_ms}  # fmt: skip
            return ok(f"spawn {req.spawn_id} ({profile}) requested on {host}", data)

        add_stop_and_workers(tool, gid=gid, control=control)

    if extra_tools is not None:
        extra_tools(server)
    return server
