"""Options every long-running command shares: where its /metrics listens, how it purges its store.

``--metrics-port N [--metrics-address ADDR]`` serves the process's registry (its failure,
purge and own metrics) over HTTP, with ``/healthz`` and ``/readyz`` beside ``/metrics``
(:mod:`pipeline.observability.health`): :func:`serve_metrics`, the one place that starts the
server (``fleet gateway run``, ``fleet relay run``, ``fleet pool run``, ``fleet dlq report``).
``--retention KEY=VALUE`` (repeatable) sets a ``[retention]`` key for a process without a
fleet.toml, checked like the file's table; ``--no-purge`` turns its purge off (docs/store.md).
Light on purpose: ``fleet --help`` imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline.errors import ConfigError
from pipeline.reasons import Config

if TYPE_CHECKING:
    from pipeline.observability.health import Health
    from pipeline.retention import RetentionConfig

MetricsPortOpt = Annotated[
    int | None, typer.Option("--metrics-port", help="Serve Prometheus /metrics on this port.")
]
MetricsAddressOpt = Annotated[
    str,
    typer.Option(
        "--metrics-address",
        help="Address /metrics listens on (0.0.0.0: every interface, for a remote scraper).",
    ),
]
RetentionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--retention",
        metavar="KEY=VALUE",
        help="A [retention] key for this process's store purge (repeatable), e.g. "
        "outbox_sent_s=3600 (docs/store.md).",
    ),
]
NoPurgeOpt = Annotated[
    bool, typer.Option("--no-purge", help="Do not purge finished rows from the store.")
]
LOOPBACK = "127.0.0.1"


def serve_metrics(
    registry: Any, *, port: int | None, address: str = LOOPBACK, health: Health | None = None
) -> Any:
    """Serve ``registry`` on ``address:port``, and ``health``'s ``/healthz`` and ``/readyz``
    (``port`` None: not served, returns None); a port in use or a bad address is a
    ConfigError."""
    if port is None:
        return None
    from pipeline.observability.health import serve

    try:
        return serve(registry, port=port, address=address, health=health)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--metrics-address {address} --metrics-port {port}: {exc}") from None


def retention_from(
    pairs: list[str] | None, *, no_purge: bool = False, base: RetentionConfig | None = None
) -> RetentionConfig | None:
    """``--retention KEY=VALUE`` pairs over ``base`` (a fleet.toml's table, else the defaults);
    ``None`` with ``--no-purge``. Unknown keys and bad values are refused like in the file."""
    from dataclasses import asdict, fields

    from pipeline.retention import RetentionConfig

    if no_purge:
        return None
    values = asdict(base or RetentionConfig())
    names = {f.name: f.type for f in fields(RetentionConfig)}
    for pair in pairs or ():
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or key not in names:
            raise ConfigError(
                f"--retention {pair!r}: expected KEY=VALUE with KEY one of {', '.join(names)}",
                reason=Config.CONFIG_UNKNOWN_KEY if sep else Config.CONFIG_INVALID,
                context={"key": f"retention.{key}", "value": raw},
            )
        try:
            values[key] = int(raw) if names[key] == "int" else float(raw)
        except ValueError:
            raise ConfigError(
                f"--retention {pair!r}: {raw!r} is not a number",
                reason=Config.CONFIG_INVALID,
                context={"key": f"retention.{key}", "value": raw},
            ) from None
    return RetentionConfig(**values)
