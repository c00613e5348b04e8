"""``fleet roster`` -- the live union view, rebuilt from the signed roster topic, or (with
``--config``) the view a host's gateway mirrors into its store, which works while the broker is
down and says STALE when that gateway's follower is cut off."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from pipeline.envelope import TrustStore
from pipeline.kafka.topics import TopicNames
from pipeline.presence import PresenceEntry, RosterFollower, RosterView
from pipeline.support.clock import now_ms

from .keys_cmd import DEFAULT_TRUST_DIR
from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Who is live where (signed presence).")


@app.callback(invoke_without_command=True)
@fail_on_fleet_error
def roster(
    bootstrap: BootstrapOpt = None,
    trust_dir: Annotated[Path, typer.Option(help="Trust directory (*.pub).")] = DEFAULT_TRUST_DIR,
    prefix: Annotated[str, typer.Option(help="Topic name prefix.")] = "fleet.",
    include_stale: Annotated[bool, typer.Option("--all", help="Include lapsed entries.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Show this host gateway's view.")
    ] = None,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Read the roster from the beginning, verify every record, print the live entries."""
    if config is not None:
        _gateway_view(config, include_stale=include_stale, as_json=as_json)
        return
    topics = TopicNames(prefix=prefix)
    view = RosterView.build(trust=TrustStore.load(trust_dir), topics=topics)
    server = bootstrap_from(bootstrap)
    follower = RosterFollower(
        bootstrap=server,
        view=view,
        topics=topics,
        consumer_factory=kafka_factories(kafka_config, kafka_property, check=server).consumer,
    )
    try:
        follower.catch_up()
    finally:
        follower.stop()
    now = now_ms()
    entries = view.entries(include_stale=include_stale)
    if as_json:
        emit_json({
            **view.freshness().as_json(now),
            "entries": [e.as_json(view.horizon_ms()) for e in entries],
            "hosts": sorted(view.hosts()),
            "rejected": dict(view.rejections),
            "superseded": dict(view.superseded),
        })  # fmt: skip
        return
    from rich.table import Table

    table = Table(title=f"roster {topics.roster}")
    for col in ("host", "gid", "role", "delivery", "groups", "age_s", "live"):
        table.add_column(col)
    for e in entries:
        extra = ",".join(p.name for p in e.profiles) if e.profiles else ",".join(e.groups)
        table.add_row(e.host, e.gid, e.role.value, e.delivery.value, extra,
                      f"{(now - e.ts_ms) / 1000:.0f}", liveness(e, view.is_live(e), now))  # fmt: skip
    console.print(table)
    if view.rejections:
        console.print(f"[yellow]rejected records by reason: {dict(view.rejections)}[/]")


def _gateway_view(config: Path, *, include_stale: bool, as_json: bool) -> None:
    from pipeline.host import roster_cache
    from pipeline.host.config import load_config
    from pipeline.store import make_engine, read_sessions

    cfg = load_config(config)
    engine = make_engine(cfg.store_url)
    try:
        with read_sessions(engine)() as s:
            state = roster_cache.read_state(s)
            entries = roster_cache.all_entries(s)
    finally:
        engine.dispose()
    now = now_ms()
    # the gateway rewrites its state row at least every 2 s: an older one means it is not running
    gateway_silent = state.written_ms < now - 10_000
    stale = state.stale or gateway_silent
    why = state.why or ("the gateway has not refreshed its view" if gateway_silent else "")
    rows = [(e, state.is_live(e, now)) for e in entries]
    rows = [(e, live) for e, live in rows if include_stale or live]
    horizon_age = None if state.horizon_ms is None else (now - state.horizon_ms) / 1000
    if as_json:
        emit_json({
            "host": cfg.host, "stale": stale, "why": why, "horizon_ms": state.horizon_ms,
            "horizon_age_s": horizon_age, "written_ms": state.written_ms,
            "entries": [{"gid": e.gid, "host": e.host, "role": e.role, "delivery": e.delivery,
                         "groups": list(e.groups), "expires_ms": e.expires_ms, "live": live}
                        for e, live in rows],
        })  # fmt: skip
        return
    from rich.table import Table

    status = f"STALE ({why})" if stale else "current"
    age = "" if horizon_age is None else f", read up to {horizon_age:.0f} s ago"
    table = Table(title=f"roster as seen by {cfg.host}: {status}{age}")
    for col in ("host", "gid", "role", "delivery", "groups", "live"):
        table.add_column(col)
    for e, live in rows:
        table.add_row(e.host, e.gid, e.role, e.delivery, ",".join(e.groups),
                      "yes" if live else "no")  # fmt: skip
    console.print(table)


def liveness(entry: PresenceEntry, live: bool, now: int) -> str:
    """``yes``, ``no``, or ``away since HH:MM:SS UTC (N s, grace M s left)`` for an entry whose
    gateway stopped without leaving (docs/presence.md "Away")."""
    since = entry.away_since_ms
    if since is None:
        return "yes" if live else "no"
    at = datetime.fromtimestamp(since / 1000, tz=UTC).strftime("%H:%M:%S")
    left = (entry.ts_ms + entry.ttl_ms - now) / 1000
    tail = f"grace {left:.0f} s left" if live else "lapsed"
    return f"away since {at} UTC ({(now - since) / 1000:.0f} s, {tail})"
