"""``fleet lab predict`` and ``fleet lab run`` -- the consumer-group scaling lab."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.lab.loader import load_scenario
from pipeline.lab.model import predict as predict_scenario
from pipeline.lab.render import prediction_lines

from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .output import emit_json, fail_on_fleet_error

app = typer.Typer(help="Size a worker pool: predict with the R-LAB-1 model, then measure it.")

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


@app.command()
@fail_on_fleet_error
def run(
    scenario: ScenarioFile,
    *,
    out: Annotated[Path, typer.Option("--out", help="Directory for report.md/.json and plots.")],
    bootstrap: BootstrapOpt = None,
    tick: Annotated[float, typer.Option("--tick", help="Wall seconds between samples.")] = 0.5,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store-url",
            help="The members' shared dedupe/result store (default: SQLite in --out; SQLite "
            "serialises the members' writes -- use PostgreSQL for saturation runs).",
        ),
    ] = None,
    kafka_config: KafkaConfigOpt = None,
) -> None:
    """Run the scenario on the real broker (producer, pool members, faults on schedule), sample
    lag per partition, and write report.md, report.json and PNG plots beside the prediction."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from pipeline.lab.plots import require_plotting
    from pipeline.lab.runner import require_pool_command
    from pipeline.lab.runner import run as run_scenario
    from pipeline.signals import interrupt_on_sigterm

    s = load_scenario(scenario)
    require_pool_command()
    require_plotting()
    interrupt_on_sigterm()  # a killed run stops the producer and members it started
    server = bootstrap_from(bootstrap)
    factories = kafka_factories(kafka_config, check=server)
    # the producer and pool-member processes log in with the same file (no -X here: the
    # children would not see it)
    child_env = {"FLEET_KAFKA_CONFIG": str(kafka_config.resolve())} if kafka_config else {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[what]}"),
        TimeRemainingColumn(),
    ) as bar:
        task = bar.add_task(s.name, total=s.duration_s, what="starting")
        analysis, _extra = run_scenario(
            s,
            source=scenario,
            bootstrap=server,
            out=out,
            tick_s=tick,
            store_url=store_url,
            progress=lambda t, what: bar.update(task, completed=t, what=what),
            admin_factory=factories.admin,
            consumer_factory=factories.consumer,
            child_env=child_env,
        )
    for row in analysis.rows:
        verdict = "-" if row.ok is None else ("ok" if row.ok else "OFF")
        typer.echo(
            f"{verdict:>3}  {row.quantity}: predicted {row.predicted}, measured {row.measured}"
        )
    if analysis.machine_bound:
        typer.echo("the MACHINE decided this result: " + "; ".join(analysis.machine_bound))
    typer.echo(f"report: {out / 'report.md'}")


@app.command(hidden=True)
@fail_on_fleet_error
def produce(
    scenario: ScenarioFile,
    *,
    bootstrap: BootstrapOpt = None,
    topic: Annotated[str, typer.Option("--topic")],
    start_at: Annotated[float, typer.Option("--start-at", help="Unix time of scenario t=0.")],
    stats: Annotated[Path, typer.Option("--stats", help="Where to write the producer's stats.")],
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """The lab's load generator process (started by ``fleet lab run``)."""
    from pipeline.lab.producer import produce as produce_events

    produce_events(
        load_scenario(scenario),
        bootstrap=bootstrap_from(bootstrap),
        topic=topic,
        start_at=start_at,
        stats=stats,
        producer_factory=kafka_factories(kafka_config, kafka_property).producer,
    )
