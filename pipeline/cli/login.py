"""The one ``--kafka-config`` option every ``fleet`` command that talks to Kafka takes.

A command builds its clients from :func:`kafka_factories`: the ``[kafka]`` table of the file
(a fleet.toml, or ``<login>.kafka.toml`` written by ``fleet kafka up --secure``) applied to every
producer, consumer and admin by :meth:`pipeline.bootstrap.client.Factories.secured` (which goes
through ``with_security``, the one place). Without the option (nor ``FLEET_KAFKA_CONFIG``) the
clients connect in plaintext, as before. Commands that read a host's fleet.toml (``--config``)
use its ``[kafka]`` table instead; giving both with different logins is refused.
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

KafkaConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kafka-config",
        envvar="FLEET_KAFKA_CONFIG",
        help="A TOML file whose [kafka] table is the login to use (docs/security.md).",
    ),
]


def kafka_factories(kafka_config: Path | None, *, check: str | None = None) -> Factories:
    """Factories with the ``[kafka]`` login of ``kafka_config`` (plaintext without one). With
    ``check`` (a bootstrap) and a login, a refused login stops here with its reason
    (AUTH_FAILED, TLS_FAILED) instead of librdkafka retrying it for ever."""
    from pipeline.bootstrap.client import Factories
    from pipeline.kafka.security import load_kafka_file

    if kafka_config is None:
        return Factories()
    factories = Factories().secured(load_kafka_file(kafka_config, environ=os.environ))
    if check is not None:
        factories.check_access(check)
    return factories


def stop_on_refused_login(factories: Factories, stop: threading.Event) -> list[SecurityError]:
    """Set ``stop`` when a client of ``factories`` has its login refused after start; the list
    then holds the ``AUTH_FAILED`` error, for the command to raise once it has stopped (exit 2,
    ``[AUTH_FAILED] ...``) instead of librdkafka retrying the refusal for ever."""
    refused: list[SecurityError] = []

    def listener(exc: SecurityError) -> None:
        refused.append(exc)
        stop.set()

    factories.on_login_refused(listener)
    return refused
