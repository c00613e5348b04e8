"""``fleet spawn`` / ``fleet stop`` / ``fleet workers``: the lifecycle from the command line
(R-SPAWN-3, R-LIFE-3, requester side; ``workers`` reads this host's own store)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import hot
from .gateway_cmd import ConfigOpt, JsonOpt, _load, _signer
from .output import console, emit_json, fail_on_fleet_error

if TYPE_CHECKING:
    from pipeline.host.gateway_config import GatewayConfig


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
    cfg = _load(Path(config))
    req = _control(
        cfg,
        "spawn",
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
                "msgId": req["msg_id"],
                "spawnId": req["spawn_id"],
                "host": req["host"],
                "profile": req["profile"],
                "deadline": req["deadline_ms"],
            }
        )
    else:
        console.print(f"queued SPAWN {req['msg_id']}: {req['spawn_id']} ({profile}) on {host}")


def stop(
    config: ConfigOpt,
    gid: Annotated[str, typer.Option("--gid", help="The worker to stop.")],
    requester: Annotated[
        str | None,
        typer.Option("--as", help="The requesting local entity (default: the one pull entity)."),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Its host (default: from the roster).")
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why (kept in the target's logs).")] = None,
    stop_id: Annotated[
        str | None, typer.Option("--id", help="The stopId (dedupe key; default: minted).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Queue a STOP for a spawned worker (outbox; works while the broker is down). Its host
    stops it, tombstones its presence and marks it reaped; the outcome (INJECTED = stopped, or
    FAILED with the reason) arrives through ``fleet poll``.

    Only its spawner, a main of its job or an operator of its host may stop it: anyone else
    gets FAILED NOT_PERMITTED, saying why."""
    from pipeline.presence.model import Delivery
    from pipeline.support.binder import config_error

    cfg = _load(Path(config))
    if requester is None:
        pulls = [e.gid for e in cfg.entities if e.delivery is Delivery.PULL]
        if len(pulls) != 1:
            raise config_error("--as", None, f"name the requester: pull entities here are {pulls}")
        requester = pulls[0]
    req = _control(
        cfg, "stop", requester=requester, gid=gid, host=host, reason=reason, stop_id=stop_id
    )
    if as_json:
        emit_json({"msgId": req["msg_id"], "stopId": req["stop_id"], "gid": req["gid"],
                   "host": req["host"]})  # fmt: skip
    else:
        console.print(f"queued STOP {req['msg_id']}: {req['gid']} on {req['host']} "
                      f"(stopId {req['stop_id']}); the outcome comes through fleet poll "
                      "(NOT_PERMITTED, with why, unless you may stop it)")  # fmt: skip


def _control(cfg: GatewayConfig, op: str, **fields: Any) -> dict[str, Any]:
    """A SPAWN or STOP queued through the gateway's local socket when one answers (it commits
    it, as it does sends), else straight into the store; the queued request's fields."""
    client = hot.connect(cfg)
    if client is not None:
        with client:
            return client.control(op, **fields)
    import dataclasses

    from pipeline.bootstrap.client import build_control_client

    control = build_control_client(cfg, signer=_signer(cfg))
    call = control.spawn if op == "spawn" else control.stop
    return dataclasses.asdict(call(**fields))


def workers(config: ConfigOpt, as_json: JsonOpt = False) -> None:
    """Live workers this host spawned: gid, parent, job, profile, age (from the local store)."""
    from sqlalchemy import select

    from pipeline.control.spawns import LIVE, spawns_table
    from pipeline.store import make_engine
    from pipeline.support.clock import now_ms

    cfg = _load(Path(config))
    engine = make_engine(cfg.store_url)
    with engine.connect() as c:
        rows = list(c.execute(select(spawns_table).where(spawns_table.c.state == LIVE)))
    engine.dispose()
    now = now_ms()
    out = [
        {"gid": r.spawn_id, "parent": r.parent, "job": r.job, "profile": r.profile,
         "pid": r.pid, "ageS": round((now - r.created_ms) / 1000, 1)}
        for r in rows
    ]  # fmt: skip
    if as_json:
        emit_json(out)
        return
    for w in out:
        console.print(
            f"{w['gid']:<24} parent={w['parent']} job={w['job'] or '-'} "
            f"profile={w['profile']} age={w['ageS']}s"
        )


def register(root: typer.Typer) -> None:
    root.command("spawn")(fail_on_fleet_error(spawn))
    root.command("stop")(fail_on_fleet_error(stop))
    root.command("workers")(fail_on_fleet_error(workers))
