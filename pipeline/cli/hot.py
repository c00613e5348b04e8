"""What ``fleet send|ask|answer|abandon|poll`` do through a running gateway, shared by the Typer
commands and the lean entry (:mod:`.entry`): one implementation, two parsers in front of it.

Nothing here imports Typer, Rich, SQLAlchemy, confluent-kafka or the envelope: the gateway's
socket client (:mod:`pipeline.host.socket_client`) and the config loader are all a send
through the socket needs. Output is plain text (stdout: the result; stderr: ``error [REASON]
message``), the same bytes whichever parser ran.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import DeliveryError, FleetError

from .exits import exit_code

if TYPE_CHECKING:
    from pipeline.host.gateway_config import GatewayConfig
    from pipeline.host.socket_client import Queued, SocketClient


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")


def print_error(exc: FleetError) -> None:
    sys.stderr.write(f"error {exc}\n")


def read_body(text: str | None) -> bytes:
    """The body argument as bytes: the text itself, or stdin for ``None`` or ``-``."""
    if text is None or text == "-":
        return sys.stdin.buffer.read()
    return text.encode("utf-8")


def connect(cfg: GatewayConfig) -> SocketClient | None:
    """A connection to the host's gateway, or ``None`` when none answers (nothing was sent)."""
    from pipeline.host.socket_client import GatewayUnavailable, SocketClient

    if not cfg.local_socket:
        return None
    try:
        return SocketClient.connect(cfg.local_socket)
    except GatewayUnavailable:
        return None


def sent(*, msg_id: str, trace_id: str, to: str, kind: str, via: str, as_json: bool) -> None:
    if as_json:
        emit_json({"msgId": msg_id, "traceId": trace_id, "to": to, "kind": kind, "via": via})
    else:
        sys.stdout.write(f"queued {kind} {msg_id} -> {to}\n")


def refused_json(exc: DeliveryError, to: str) -> None:
    """A refused send under ``--json``: the MCP error shape (pipeline.mcp.server.failed), plus
    the error's context."""
    emit_json({"error": {"reason": exc.reason, "retriable": exc.retriable, "message": str(exc),
                         "to": to, **exc.context}})  # fmt: skip


def _gateway(params: dict[str, Any]) -> SocketClient | None:
    """The lean half's connection: ``None`` when the Typer command must run instead -- no gateway
    answers (that command writes the store directly) or the config does not load (that command
    reports why). Nothing was sent and stdin is unread then."""
    from pipeline.host.config import load_config

    try:
        cfg = load_config(Path(params["config"]))
    except (FleetError, OSError):
        return None
    return connect(cfg)


def send(params: dict[str, Any]) -> int | None:
    """``fleet send`` through the gateway's socket: its exit code, or ``None`` (see
    :func:`_gateway`)."""
    client = _gateway(params)
    if client is None:
        return None
    to, kind = params["to"], str(params["kind"]).upper()
    with client:
        body = read_body(params["body"])
        try:
            queued = client.send(sender=params["sender"], to=to, body=body, kind=params["kind"],
                                 ttl_s=params["ttl"], trace_id=params["trace"])  # fmt: skip
        except DeliveryError as exc:
            refused_json(exc, to) if params["as_json"] else print_error(exc)
            return exit_code(exc)
        except FleetError as exc:
            print_error(exc)
            return exit_code(exc)
    sent(msg_id=queued.msg_id, trace_id=queued.trace_id, to=to, kind=kind, via="gateway",
         as_json=params["as_json"])  # fmt: skip
    return 0


def asked(*, msg_id: str, turn_id: str | None, to: str, as_json: bool) -> None:
    if as_json:
        emit_json({"msgId": msg_id, "turnId": turn_id})
    else:
        sys.stdout.write(f"asked {to}: turn {turn_id}\n")


def answered(*, msg_id: str, turn_id: str, as_json: bool) -> None:
    if as_json:
        emit_json({"msgId": msg_id, "turnId": turn_id})
    else:
        sys.stdout.write(f"answered turn {turn_id}\n")


def abandoned(*, msg_id: str, turn_id: str, as_json: bool) -> None:
    if as_json:
        emit_json({"msgId": msg_id, "turnId": turn_id})
    else:
        sys.stdout.write(f"abandoned turn {turn_id}\n")


def _verb(params: dict[str, Any], call: Callable[[SocketClient], Queued],
          report: Callable[[Queued], None]) -> int | None:  # fmt: skip
    client = _gateway(params)
    if client is None:
        return None
    with client:
        try:
            queued = call(client)
        except FleetError as exc:
            print_error(exc)
            return exit_code(exc)
    report(queued)
    return 0


def ask(p: dict[str, Any]) -> int | None:
    """``fleet ask`` through the gateway's socket (``None``: see :func:`_gateway`)."""
    return _verb(
        p,
        lambda c: c.ask(
            sender=p["sender"],
            to=p["to"],
            body=read_body(p["body"]),
            ttl_s=p["ttl"],
            trace_id=p["trace"],
        ),
        lambda q: asked(msg_id=q.msg_id, turn_id=q.turn_id, to=p["to"], as_json=p["as_json"]),
    )


def answer(p: dict[str, Any]) -> int | None:
    """``fleet answer`` through the gateway's socket (``None``: see :func:`_gateway`)."""
    return _verb(
        p,
        lambda c: c.answer(
            sender=p["sender"],
            to=p["to"],
            turn_id=p["turn"],
            body=read_body(p["body"]),
            trace_id=p["trace"],
        ),
        lambda q: answered(msg_id=q.msg_id, turn_id=p["turn"], as_json=p["as_json"]),
    )


def abandon(p: dict[str, Any]) -> int | None:
    """``fleet abandon`` through the gateway's socket (``None``: see :func:`_gateway`)."""
    return _verb(
        p,
        lambda c: c.abandon(sender=p["sender"], to=p["to"], turn_id=p["turn"]),
        lambda q: abandoned(msg_id=q.msg_id, turn_id=p["turn"], as_json=p["as_json"]),
    )


def polled(messages: list[dict[str, Any]], lines: list[str], *, as_json: bool) -> None:
    """``fleet poll``'s output: the held messages as JSON, or one line each."""
    if as_json:
        emit_json(messages)
    else:
        sys.stdout.writelines(f"{line}\n" for line in lines)


def poll(p: dict[str, Any]) -> int | None:
    """``fleet poll`` through the gateway's socket (``None``: see :func:`_gateway`)."""
    client = _gateway(p)
    if client is None:
        return None
    with client:
        try:
            got = client.poll(p["recipient"], sender=p["sender"], limit=p["limit"],
                              wait_s=p["wait"])  # fmt: skip
        except FleetError as exc:
            print_error(exc)
            return exit_code(exc)
    polled(got["messages"], got["lines"], as_json=p["as_json"])
    return 0
