"""The ``fleet`` command: one Typer app, each subsystem adds its own sub-app here."""

from __future__ import annotations

import typer

from . import kafka_cmd, observability_cmd

app = typer.Typer(
    name="fleet",
    help="fleet-pipeline: signed agent messaging on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(kafka_cmd.app, name="kafka")
app.add_typer(observability_cmd.app)  # top-level: fleet exporter, fleet lag


def main() -> None:  # pragma: no cover
    app()
