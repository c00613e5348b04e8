"""``fleet lab predict`` and ``fleet lab run`` -- the consumer-group scaling lab (issue 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.lab.loader import load_scenario
from pipeline.lab.model import predict as predict_scenario
from pipeline.lab.render import prediction_lines

from .output import emit_json, fail_on_fleet_error

app = typer.Typer(help="Size a worker pool: predict with seed 001's model, then measure it.")

ScenarioFile = Annotated[Path, typer.Argument(help="Scenario TOML file (see examples/lab/).")]


@app.command()
@fail_on_fleet_error
def predict(
    scenario: ScenarioFile,
    *,
    as_json: Annotated[bool, typer.Option("--json", help="Print the prediction as JSON.")] = False,
) -> None:
    """The model alone: Little's law, capacity, utilisation, outage backlog and drain time,
    duplicate bound, assignment per member, lag drain, poison stall, poll-interval check."""
    s = load_scenario(scenario)
    p = predict_scenario(s)
    if as_json:
        emit_json({"scenario": s.name, "prediction": p.to_json()})
        return
    for line in prediction_lines(s, p):
        typer.echo(line)
