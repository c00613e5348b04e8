"""How every ``fleet`` command that talks to Kafka is told where it is and how to log in.

One definition of each option, used by every such command (docs/cli.md "Connecting"):

* ``--bootstrap-server`` / ``-b`` (``--bootstrap`` kept as an alias), default
  ``$KAFKA_BOOTSTRAP``: :data:`BootstrapOpt`, resolved by :func:`bootstrap_from`.
* ``--command-config FILE`` (``--kafka-config`` kept as an alias), default
  ``$FLEET_KAFKA_CONFIG`` then ``$KAFKA_COMMAND_CONFIG``: a Java client ``.properties`` file as
  written for ``kafka-console-consumer --command-config`` (or librdkafka keys in that syntax), or
  a TOML file whose ``[kafka]`` table is the login (a fleet.toml, or ``<login>.kafka.toml``
  written by ``fleet kafka up --secure``). A ``.toml`` name means TOML; anything else is read as
  properties (:mod:`pipeline.kafka.properties`).
* ``-X KEY=VALUE`` (repeatable): a librdkafka setting laid over the file; never a credential.

A command builds its clients from :func:`kafka_factories`: the login applied to every producer,
consumer and admin by :meth:`pipeline.bootstrap.client.Factories.secured` (which goes through
``with_security``, the one place). Without any of them the clients connect in plaintext.
Commands that read a host's fleet.toml (``--config``) take its ``bootstrap`` and ``[kafka]``
table, replaced by ``-b`` / ``--command-config`` given on the command line (not by
``$KAFKA_BOOTSTRAP`` / ``$KAFKA_COMMAND_CONFIG``: the file names its cluster), with ``-X``
laid over either (:data:`BootstrapOverrideOpt`, :func:`config_security`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import threading

    from pipeline.bootstrap.client import Factories
    from pipeline.errors import SecurityError
    from pipeline.kafka.security import KafkaSecurity

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"

BOOTSTRAP_NAMES = ("--bootstrap-server", "-b", "--bootstrap")
COMMAND_CONFIG_NAMES = ("--command-config", "--kafka-config")
COMMAND_CONFIG_ENV = ["FLEET_KAFKA_CONFIG", "KAFKA_COMMAND_CONFIG"]
_SERVERS = "HOST:PORT[,...]"
_LOGIN_HELP = (
    "The login: a Java client .properties file (as for kafka-console-consumer --command-config),"
    " or a TOML file whose kafka table is the login (docs/security.md)."
)

BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        *BOOTSTRAP_NAMES,
        envvar=BOOTSTRAP_ENV,
        metavar=_SERVERS,
        help=f"Kafka bootstrap servers (default: ${BOOTSTRAP_ENV}).",
    ),
]
KafkaConfigOpt = Annotated[
    Path | None,
    typer.Option(
        *COMMAND_CONFIG_NAMES, envvar=COMMAND_CONFIG_ENV, metavar="FILE", help=_LOGIN_HELP
    ),
]
# The same options on a command that reads a host's fleet.toml: the file names its cluster and
# login, so only the command line replaces them (not $KAFKA_BOOTSTRAP, which a test run or a
# shell may carry for another cluster); FLEET_BOOTSTRAP does, as an override of the file's key.
BootstrapOverrideOpt = Annotated[
    str | None,
    typer.Option(
        *BOOTSTRAP_NAMES, metavar=_SERVERS, help="Kafka bootstrap servers (over the file's)."
    ),
]
KafkaConfigOverrideOpt = Annotated[
    Path | None,
    typer.Option(
        *COMMAND_CONFIG_NAMES, metavar="FILE", help=_LOGIN_HELP + " Over the file's login."
    ),
]
KafkaPropertyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "-X",
        metavar="KEY=VALUE",
        help="A librdkafka property (repeatable); never a credential (docs/security.md).",
    ),
]


def bootstrap_from(value: str | None) -> str:
    """The bootstrap servers a command was given (the option, else ``$KAFKA_BOOTSTRAP``); none
    is a usage error (exit 2)."""
    found = value or os.environ.get(BOOTSTRAP_ENV)
    if not found:
        raise typer.BadParameter(
            f"no broker: pass --bootstrap-server (-b) or set {BOOTSTRAP_ENV}",
            param_hint="'--bootstrap-server' / '-b'",
        )
    return found


def kafka_security(
    kafka_config: Path | None, properties: list[str] | None = None
) -> KafkaSecurity | None:
    """The login of ``--command-config`` with ``-X`` laid over it; ``None`` when neither is
    given (plaintext, or the fleet.toml's own ``[kafka]``)."""
    from pipeline.kafka.properties import (
        command_line_properties,
        load_properties_file,
        with_properties,
    )
    from pipeline.kafka.security import PLAINTEXT, load_kafka_file

    if kafka_config is None and not properties:
        return None
    security = PLAINTEXT
    if kafka_config is not None:
        if kafka_config.suffix == ".toml":
            security = load_kafka_file(kafka_config, environ=os.environ)
        else:
            security = load_properties_file(kafka_config, environ=os.environ)
    extra = command_line_properties(properties or [])
    return with_properties(security, extra, environ=os.environ)


def config_security(
    base: KafkaSecurity, kafka_config: Path | None, properties: list[str] | None
) -> KafkaSecurity:
    """A fleet.toml's ``[kafka]`` login (``base``), replaced by ``--command-config`` when one
    is given, with ``-X`` laid over either."""
    from pipeline.kafka.properties import command_line_properties, with_properties

    if kafka_config is not None:
        found = kafka_security(kafka_config, properties)
        assert found is not None
        return found
    return with_properties(base, command_line_properties(properties or []), environ=os.environ)


def kafka_factories(
    kafka_config: Path | None,
    properties: list[str] | None = None,
    *,
    check: str | None = None,
) -> Factories:
    """Factories with the login of ``--command-config`` / ``-X`` (plaintext without one). With
    ``check`` (a bootstrap) and a login, a refused login stops here with its reason
    (AUTH_FAILED, TLS_FAILED) instead of librdkafka retrying it for ever."""
    from pipeline.bootstrap.client import Factories

    security = kafka_security(kafka_config, properties)
    if security is None:
        return Factories()
    factories = Factories().secured(security)
    if check is not None:
        factories.check_access(check)
    return factories


def stop_on_refused_login(factories: Factories, stop: threading.Event) -> list[SecurityError]:
    """Set ``stop`` when a client of ``factories`` has its login refused after start; the list
    then holds the ``AUTH_FAILED`` error, for the command to raise once it has stopped (exit 1,
    ``[AUTH_FAILED] ...``) instead of librdkafka retrying the refusal for ever."""
    refused: list[SecurityError] = []

    def listener(exc: SecurityError) -> None:
        refused.append(exc)
        stop.set()

    factories.on_login_refused(listener)
    return refused
