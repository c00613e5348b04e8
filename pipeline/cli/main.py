"""The ``fleet`` command: one Typer app, each subsystem adds its own sub-app here."""

from __future__ import annotations

import typer

from . import (
    acls_cmd,
    control_cmd,
    demo_cmd,
    dlq_cmd,
    gateway_cmd,
    idem_cmd,
    kafka_cmd,
    keys_cmd,
    lab_cmd,
    observability_cmd,
    outbox_cmd,
    pool_cmd,
    quarantine_cmd,
    relay_cmd,
    roster_cmd,
    saga_cmd,
    store_cmd,
    topics_cmd,
)

app = typer.Typer(
    name="fleet",
    help="fleet-pipeline: signed agent messaging on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(kafka_cmd.app, name="kafka")
app.add_typer(observability_cmd.app)  # top-level: fleet exporter, fleet lag
app.add_typer(keys_cmd.app, name="keys")
app.add_typer(lab_cmd.app, name="lab")
app.add_typer(topics_cmd.app, name="topics")
app.add_typer(roster_cmd.app, name="roster")
app.add_typer(outbox_cmd.app, name="outbox")
app.add_typer(relay_cmd.app, name="relay")
app.add_typer(store_cmd.app, name="store")
app.add_typer(dlq_cmd.app, name="dlq")
app.add_typer(quarantine_cmd.app, name="quarantine")
app.add_typer(idem_cmd.app, name="idem")
app.add_typer(saga_cmd.app, name="saga")
app.add_typer(gateway_cmd.app, name="gateway")
app.add_typer(pool_cmd.app, name="pool")
app.add_typer(acls_cmd.app, name="acls")
gateway_cmd.register(app)  # fleet send | ask | answer | poll
gateway_cmd.register(app)  # fleet send | ask | answer | abandon | poll | mcp
demo_cmd.register(app)  # fleet demo
control_cmd.register(app)  # fleet spawn


def main() -> None:  # pragma: no cover
    app()
