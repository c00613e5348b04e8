"""``fleet acls plan|apply`` -- a login's least-privilege ACLs, per role (docs/security.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.kafka.acls import Role, apply_grants, role_grants
from pipeline.kafka.topics import TopicNames

from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Least-privilege ACLs per login and role.", no_args_is_help=True)

HostOpt = Annotated[
    str,
    typer.Option(
        "--host",
        "--login",
        help="The login (principal User:NAME); for the gateway role, the gateway's host id.",
    ),
]
RoleOpt = Annotated[
    Role,
    typer.Option(
        "--role",
        help="gateway (a host's gateway), reporter (the FAILED reporter), exporter (offsets "
        "only), dlq-owner (read and replay the DLQ), pool (a member of --pool NAME).",
    ),
]
PoolOpt = Annotated[
    str | None, typer.Option("--pool", help="The pool's name (only with --role pool).")
]
PrefixOpt = Annotated[str, typer.Option(help="Topic name prefix.")]


@app.command()
@fail_on_fleet_error
def plan(
    host: HostOpt,
    role: RoleOpt = Role.GATEWAY,
    prefix: PrefixOpt = "fleet.",
    pool: PoolOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the ACLs a login of ROLE needs and no more. gateway: read its own inbox, control
    and group; write the others' inboxes and control topics, the roster and the DLQ."""
    grants = role_grants(role, host, TopicNames(prefix=prefix), pool=pool)
    if as_json:
        emit_json(
            [
                {
                    "principal": g.principal,
                    "resource": g.resource.value,
                    "name": g.name,
                    "pattern": g.pattern.value,
                    "operation": g.operation.value,
                }
                for g in grants
            ]
        )
        return
    for g in grants:
        typer.echo(g.line())


@app.command()
@fail_on_fleet_error
def apply(
    host: HostOpt,
    role: RoleOpt = Role.GATEWAY,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
    bootstrap: BootstrapOpt = None,
    prefix: PrefixOpt = "fleet.",
    pool: PoolOpt = None,
) -> None:
    """Create the planned ACLs for the login (idempotent: existing ACLs are kept)."""
    from pipeline.kafka.settings import admin_config

    server = bootstrap_from(bootstrap)
    factories = kafka_factories(
        kafka_config, kafka_property, check=server
    )  # a super user's, admin.kafka.toml
    grants = role_grants(role, host, TopicNames(prefix=prefix), pool=pool)
    count = apply_grants(factories.admin(admin_config(server)), grants)
    console.print(f"{count} ACLs in place for User:{host} ({role.value})")
