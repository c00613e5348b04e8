"""The MCP face's ``stop`` and ``workers`` tools (R-LIFE-1).

Self-contained: :func:`add_stop_and_workers` registers both on a server through the same
``tool`` decorator :func:`pipeline.mcp.server.build_server` uses (which turns a
:class:`~pipeline.errors.FleetError` into an error result carrying its reason code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent
from pydantic import Field

from pipeline.control import ControlClient
from pipeline.control.socket_first import SocketFirstControl

Tool = Callable[[str], Callable[[Callable[..., CallToolResult]], Any]]


def _ok(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def add_stop_and_workers(
    tool: Tool, *, gid: str, control: ControlClient | SocketFirstControl
) -> None:
    """Register ``stop`` and ``workers`` for main ``gid``."""

    @tool("Stop a worker you may stop (one you spawned, one of a job you spawned into as a "
          "main, or any if its host names you an operator): its host stops it through its "
          "profile, removes it from the roster and marks it reaped; mail for it afterwards "
          "fails with RECIPIENT_GONE. Returns the STOP's msgId; the outcome arrives through "
          "poll (INJECTED = stopped; FAILED with UNKNOWN_WORKER when it is no worker there, "
          "NOT_PERMITTED when you may not stop it -- its text says who may).")  # fmt: skip
    def stop(
        worker: Annotated[str, Field(description="The worker's gid (its spawnId).")],
        reason: Annotated[str | None, Field(description="Why, for the host's logs.")] = None,
        host: Annotated[
            str | None, Field(description="Its host; default: from the roster.")
        ] = None,
        stop_id: Annotated[
            str | None, Field(description="Dedupe key: the same stop_id stops once.")
        ] = None,
    ) -> CallToolResult:
        req = control.stop(requester=gid, gid=worker, host=host, reason=reason, stop_id=stop_id)
        data = {"msgId": req.msg_id, "stopId": req.stop_id, "gid": req.gid, "host": req.host}
        return _ok(f"stop of {req.gid} requested on {req.host} (stopId {req.stop_id}); its host "
                   "refuses it NOT_PERMITTED, saying why, unless you may stop it", data)  # fmt: skip

    @tool("The workers you spawned, newest first: gid, host, profile, job, the spawn's state "
          "(pending, spawned, failed + reason) and whether it is live in the roster now.")  # fmt: skip
    def workers() -> CallToolResult:
        rows = control.workers(gid)
        lines = [
            f"{w['gid']} on {w['host']} ({w['profile']}): {w['state']}"
            + (f" {w['reason']}" if w["reason"] else "")
            + (", live" if w["live"] else ", not live")
            for w in rows
        ]
        return _ok("\n".join(lines) or "no workers spawned", {"workers": rows})
