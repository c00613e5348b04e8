"""``fleet topics apply`` -- declare the fleet's topics idempotently (docs/topology.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology

from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(
    help="Kafka topology: inboxes, control, roster, DLQ, pools.", no_args_is_help=True
)


@app.command()
@fail_on_fleet_error
def apply(
    *,
    hosts: Annotated[list[str], typer.Option("--host", help="A host id (repeat).")],
    pools: Annotated[list[str] | None, typer.Option("--pool", help="A pool name (repeat).")] = None,
    bootstrap: BootstrapOpt = None,
    prefix: Annotated[str, typer.Option(help="Topic name prefix.")] = "fleet.",
    partitions: Annotated[int, typer.Option(help="Partitions per inbox and pool topic.")] = 6,
    replication: Annotated[
        int | None,
        typer.Option(
            help="Replication factor (default: the cluster's default.replication.factor; "
            "an existing topic keeps its own)."
        ),
    ] = None,
    min_insync: Annotated[int | None, typer.Option(help="min.insync.replicas.")] = None,
    dlq_retention_bytes: Annotated[int, typer.Option(help="DLQ cap per partition.")] = 1 << 30,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Create missing topics, set differing configs; refuse partition/replication mismatches."""
    spec = TopologySpec(
        hosts=tuple(hosts),
        pools=tuple(pools or ()),
        topics=TopicNames(prefix=prefix),
        inbox_partitions=partitions,
        pool_partitions=partitions,
        replication=replication,
        min_insync_replicas=min_insync,
        dlq_retention_bytes=dlq_retention_bytes,
    )
    server = bootstrap_from(bootstrap)
    factories = kafka_factories(kafka_config, kafka_property, check=server)
    report = apply_topology(server, spec, dry_run=dry_run, admin_factory=factories.admin)
    if as_json:
        emit_json(report.as_json())
        return
    verb = "would create" if dry_run else "created"
    for name in report.created:
        console.print(f"{verb} {name}")
    for name, diff in report.altered.items():
        for k, (old, new) in diff.items():
            console.print(f"{'would set' if dry_run else 'set'} {name} {k}: {old} -> {new}")
    console.print(f"{len(report.unchanged)} topic(s) already as declared")
