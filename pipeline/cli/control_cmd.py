"""``fleet spawn``: ask a host's gateway to start a worker (seed 000 §7.8, requester side)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .gateway_cmd import ConfigOpt, JsonOpt, _load, _signer
from .output import console, emit_json, fail_on_fleet_error


def spawn(
    config: ConfigOpt,
    requester: Annotated[str, typer.Option("--as", help="The requesting local entity's gid.")],
    host: Annotated[str, typer.Option("--host", help="Target host id.")],
    profile: Annotated[str, typer.Option("--profile", help="A profile the host advertises.")],
    spawn_id: Annotated[
        str | None, typer.Option("--id", help="The new worker's gid (default: minted).")
    ] = None,
    brief: Annotated[str | None, typer.Option(help="First brief for the worker.")] = None,
    job: Annotated[str | None, typer.Option(help="Job id (caps count per job).")] = None,
    parent: Annotated[str | None, typer.Option(help="Parent gid (default: --as).")] = None,
    budget: Annotated[int | None, typer.Option(help="Token budget for the worker.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Queue a SPAWN (outbox; works while the broker is down). The outcome, or one FAILED
    (SPAWN_TIMEOUT) past spawn_deadline_s, arrives through ``fleet poll``."""
    from pipeline.bootstrap import build_control_client

    cfg = _load(Path(config))
    req = build_control_client(cfg, signer=_signer(cfg)).spawn(
        requester=requester,
        host=host,
        profile=profile,
        spawn_id=spawn_id,
        parent=parent,
        job=job,
        brief=brief,
        budget=budget,
    )
    if as_json:
        emit_json(
            {
                "msgId": req.msg_id,
                "spawnId": req.spawn_id,
                "host": req.host,
                "profile": req.profile,
                "deadline": req.deadline_ms,
            }
        )
    else:
        console.print(f"queued SPAWN {req.msg_id}: {req.spawn_id} ({profile}) on {host}")


def register(root: typer.Typer) -> None:
    root.command("spawn")(fail_on_fleet_error(spawn))
