"""``fleet roster`` -- the live union view, rebuilt from the signed roster topic."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.envelope import TrustStore
from pipeline.envelope.model import now_ms
from pipeline.kafka.topics import TopicNames
from pipeline.presence import RosterFollower, RosterView

from .keys_cmd import DEFAULT_TRUST_DIR
from .output import console, emit_json, fail_on_fleet_error
from .topics_cmd import BootstrapOpt, bootstrap_from

app = typer.Typer(help="Who is live where (signed presence).")


@app.callback(invoke_without_command=True)
@fail_on_fleet_error
def roster(
    bootstrap: BootstrapOpt = None,
    trust_dir: Annotated[Path, typer.Option(help="Trust directory (*.pub).")] = DEFAULT_TRUST_DIR,
    prefix: Annotated[str, typer.Option(help="Topic name prefix.")] = "fleet.",
    include_stale: Annotated[bool, typer.Option("--all", help="Include lapsed entries.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Read the roster from the beginning, verify every record, print the live entries."""
    topics = TopicNames(prefix=prefix)
    view = RosterView.build(trust=TrustStore.load(trust_dir), topics=topics)
    follower = RosterFollower(bootstrap=bootstrap_from(bootstrap), view=view, topics=topics)
    try:
        follower.catch_up()
    finally:
        follower.stop()
    now = now_ms()
    entries = view.entries(include_stale=include_stale)
    if as_json:
        emit_json({
            "entries": [e.as_json(now) for e in entries],
            "hosts": sorted(view.hosts()),
            "rejected": dict(view.rejections),
        })  # fmt: skip
        return
    from rich.table import Table

    table = Table(title=f"roster {topics.roster}")
    for col in ("host", "gid", "role", "delivery", "groups", "age_s", "live"):
        table.add_column(col)
    for e in entries:
        extra = ",".join(p.name for p in e.profiles) if e.profiles else ",".join(e.groups)
        table.add_row(e.host, e.gid, e.role.value, e.delivery.value, extra,
                      f"{(now - e.ts_ms) / 1000:.0f}", "yes" if e.live(now) else "no")  # fmt: skip
    console.print(table)
    if view.rejections:
        console.print(f"[yellow]rejected records by reason: {dict(view.rejections)}[/]")
