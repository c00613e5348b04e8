"""``fleet kafka up|status|down`` -- the local KRaft broker for users and tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import ConfigError
from pipeline.kafka.local import LauncherConfig, LocalCluster, default_cluster_dir

from .output import console, fail_on_fleet_error

app = typer.Typer(help="Run a local Apache Kafka (KRaft) from Maven Central jars; no Docker.")

DirOpt = Annotated[Path | None, typer.Option("--dir", help="Cluster folder (state, data, logs).")]


@app.command()
@fail_on_fleet_error
def up(
    nodes: Annotated[int, typer.Option("--nodes", help="1, or 3 for RF 3 / min ISR 2.")] = 1,
    directory: DirOpt = None,
    port: Annotated[
        int | None, typer.Option(help="First broker port (default: free ports).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the state as JSON.")] = False,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="SASL_SSL (SCRAM-SHA-512) with local TLS files, ACLs enforced, "
            "an `admin` super user and one login per --host (docs/security.md).",
        ),
    ] = False,
    hosts: Annotated[
        list[str] | None,
        typer.Option("--host", help="With --secure: create a login for this host (repeat)."),
    ] = None,
) -> None:
    """Start a local cluster in the background and print its bootstrap servers."""
    if hosts and not secure:
        raise ConfigError("--host creates a login: it needs --secure", reason="CONFIG_INVALID")
    cluster = LocalCluster(
        LauncherConfig(
            directory=directory or default_cluster_dir(),
            nodes=nodes,
            port=port,
            secure_hosts=tuple(hosts or ()) if secure else None,
        )
    ).start()
    if as_json:
        typer.echo(json.dumps({**cluster.state(), "version": cluster.version()}))
    else:
        console.print(f"Kafka {cluster.version()} ready ({nodes} node(s)) in {cluster.directory}")
        if cluster.secure is not None:
            console.print(
                f"SASL_SSL with ACLs; client file {cluster.secure.folder / 'client.json'}, "
                f"a \\[kafka] table per login in {cluster.secure.folder}/<login>.kafka.toml"
            )
        typer.echo(cluster.bootstrap_servers)


@app.command()
@fail_on_fleet_error
def status(
    directory: DirOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show the local cluster recorded in the folder: nodes, pids, ports, running or not."""
    cluster = LocalCluster.attach(directory or default_cluster_dir())
    state = cluster.state()
    if as_json:
        typer.echo(json.dumps(state))
        return
    from rich.table import Table

    table = Table(title=f"Kafka {state['kafka_version']} at {state['bootstrap_servers']}")
    for col in ("node", "port", "controller", "pid", "running"):
        table.add_column(col)
    for n in state["nodes"]:
        table.add_row(
            str(n["node_id"]),
            str(n["port"]),
            str(n["controller_port"]),
            str(n["pid"]),
            "yes" if n["running"] else "NO",
        )
    console.print(table)
    if not all(n["running"] for n in state["nodes"]):
        raise typer.Exit(1)


@app.command()
@fail_on_fleet_error
def down(directory: DirOpt = None) -> None:
    """Stop the local cluster (SIGTERM, then SIGKILL after 15 s)."""
    cluster = LocalCluster.attach(directory or default_cluster_dir())
    cluster.stop()
    console.print("stopped")
