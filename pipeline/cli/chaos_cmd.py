"""``fleet chaos run`` and ``fleet chaos list``: the fault suite with a checker."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .login import BootstrapOpt
from .output import console, emit_json, err_console, fail_on_fleet_error

app = typer.Typer(help="Faults on a seeded schedule, a recorded history, one checker.")

EXIT_VIOLATION = 1


@app.command("list")
def list_scenarios() -> None:
    """The scenarios, with the catalogue number and the requirement each checks."""
    from pipeline.chaos.catalogue import SCENARIOS

    for s in SCENARIOS.values():
        typer.echo(f"{s.name:<14} #{s.number:<3} {s.checks}")


@app.command()
@fail_on_fleet_error
def run(
    scenario: Annotated[
        list[str], typer.Option("--scenario", help="A scenario name (repeatable), or 'all'.")
    ],
    repeat: Annotated[int, typer.Option(min=1, help="Seeded repetitions per scenario.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the fault schedule.")] = 0,
    bootstrap: BootstrapOpt = None,
    duration: Annotated[float, typer.Option(help="Seconds of sending per repetition.")] = 20.0,
    rate: Annotated[float, typer.Option(help="Sends per second (REPLYs and briefs).")] = 10.0,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where histories and stores go (kept).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Run scenarios under the workload; print a table; exit 1 when the checker finds a
    violation (or a repetition could not run)."""
    from pipeline.chaos.catalogue import SCENARIOS
    from pipeline.chaos.runner import RunConfig, run_scenario
    from pipeline.errors import ConfigError
    from pipeline.reasons import Config
    from pipeline.signals import interrupt_on_sigterm

    interrupt_on_sigterm()  # a killed run stops the gateways and brokers it started

    names = list(SCENARIOS) if "all" in scenario else scenario
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ConfigError(
            f"unknown scenario {unknown}; known: {', '.join(SCENARIOS)}",
            reason=Config.CONFIG_INVALID,
        )
    root = directory or Path(tempfile.mkdtemp(prefix="fleet-chaos-"))
    cfg = RunConfig(
        root=root,
        seed=seed,
        repeat=repeat,
        bootstrap=bootstrap,
        duration_s=duration,
        rate_per_s=rate,
    )
    results = [run_scenario(n, cfg, progress=err_console.print) for n in names]
    if as_json:
        emit_json({"seed": seed, "dir": str(root), "scenarios": [r.as_dict() for r in results]})
    else:
        table = Table(title=f"fleet chaos run --seed {seed} --repeat {repeat}")
        for col in ("scenario", "reps", "ops", "faults", "lost", "dup", "order", "unseen",
                    "refused", "late", "uncertain", "bad", "slowest recovery", "verdict"):  # fmt: skip
            table.add_column(col, justify="left" if col in ("scenario", "verdict") else "right")
        for r in results:
            rec = "-" if r.slowest_recovery_s is None else f"{r.slowest_recovery_s:.1f} s"
            verdict = "ok" if r.ok else ("ERROR" if r.errors else "VIOLATION")
            table.add_row(
                f"#{r.number} {r.scenario}", str(r.repetitions), str(r.operations), str(r.faults),
                str(r.lost), str(r.duplicated), str(r.out_of_order), str(r.unseen),
                str(r.refused), str(r.late), str(r.uncertain), str(r.bad), rec, verdict,
            )  # fmt: skip
        console.print(table)
        for r in results:
            for f in r.examples:
                console.print(f"  {r.scenario}: {f.code} {f.msg_id} {f.detail}")
            for e in r.errors:
                console.print(f"  {r.scenario}: {e}")
        console.print(f"histories: {root}")
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_VIOLATION)
