"""``fleet acls plan|apply`` -- a login's least-privilege ACLs, per role (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
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
        help="The login (principal User:NAME unless --principal or --cert says otherwise); "
        "for the gateway role, the gateway's host id.",
    ),
]
PrincipalOpt = Annotated[
    str | None,
    typer.Option(
        "--principal",
        help="The principal the ACLs are for, User:NAME: an OAUTHBEARER token's sub, or any "
        "name the broker gives the login (default User:<--login>).",
    ),
]
CertOpt = Annotated[
    Path | None,
    typer.Option(
        "--cert",
        metavar="PEM",
        help="A client certificate (mutual TLS): the principal is its subject DN mapped by "
        "--mapping-rules, as the broker maps it.",
    ),
]
RulesOpt = Annotated[
    str,
    typer.Option(
        "--mapping-rules",
        metavar="RULES",
        help="The broker's ssl.principal.mapping.rules (with --cert).",
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


def principal_of(principal: str | None, cert: Path | None, rules: str) -> str | None:
    """The principal --principal or --cert names (not both), or None for User:<login>."""
    from pipeline.kafka.principals import check_principal, map_certificate

    if principal is not None and cert is not None:
        raise typer.BadParameter("give --principal or --cert, not both", param_hint="'--cert'")
    if cert is not None:
        return map_certificate(cert, rules)
    return check_principal(principal) if principal is not None else None


@app.command()
@fail_on_fleet_error
def plan(
    host: HostOpt,
    role: RoleOpt = Role.GATEWAY,
    prefix: PrefixOpt = "fleet.",
    pool: PoolOpt = None,
    principal: PrincipalOpt = None,
    cert: CertOpt = None,
    mapping_rules: RulesOpt = "DEFAULT",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the ACLs a login of ROLE needs and no more. gateway: read its own inbox, control
    and group; write the others' inboxes and control topics, the roster and the DLQ."""
    who = principal_of(principal, cert, mapping_rules)
    grants = role_grants(role, host, TopicNames(prefix=prefix), pool=pool, principal=who)
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
    principal: PrincipalOpt = None,
    cert: CertOpt = None,
    mapping_rules: RulesOpt = "DEFAULT",
) -> None:
    """Create the planned ACLs for the login (idempotent: existing ACLs are kept)."""
    from pipeline.kafka.settings import admin_config

    server = bootstrap_from(bootstrap)
    factories = kafka_factories(
        kafka_config, kafka_property, check=server
    )  # a super user's, admin.kafka.toml
    who = principal_of(principal, cert, mapping_rules)
    grants = role_grants(role, host, TopicNames(prefix=prefix), pool=pool, principal=who)
    count = apply_grants(factories.admin(admin_config(server)), grants)
    console.print(f"{count} ACLs in place for {who or f'User:{host}'} ({role.value})")
