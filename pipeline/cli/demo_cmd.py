"""``fleet demo``: the README's run command (local broker + SQLite, two gateways)."""

from __future__ import annotations

from typing import Annotated

import typer

from .login import BootstrapOpt
from .output import console, fail_on_fleet_error


def demo(
    bootstrap: BootstrapOpt = None,
    briefs: Annotated[int, typer.Option(help="How many briefs main-a sends.")] = 3,
) -> None:
    """Main on host A briefs a worker on host B; INJECTED and the REPLY come back, live.

    On the cluster -b (or $KAFKA_BOOTSTRAP) names; without one, on a local broker started for
    the demo.
    """
    from pipeline.demo import run_demo

    observed = run_demo(bootstrap=bootstrap, console=console, briefs=briefs)
    if not observed.get("ok"):
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.command("demo")(fail_on_fleet_error(demo))
