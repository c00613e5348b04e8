"""``fleet relay run`` -- the outbox relay as its own process (R-OUT-2: its own supervision).

SIGTERM or SIGINT stops it cleanly: no new batch starts, the batch in flight gets a short grace
to be confirmed and acked, anything unconfirmed stays pending and is resent by the next relay.
"""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from pipeline.signals import stop_on_signals

from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .logs import LogFormat, LogFormatOpt, LogLevel, LogLevelOpt, configure_logging
from .output import console, fail_on_fleet_error
from .serving import (
    LOOPBACK,
    MetricsAddressOpt,
    MetricsPortOpt,
    NoPurgeOpt,
    RetentionOpt,
    retention_from,
    serve_metrics,
)

app = typer.Typer(help="Ship committed outbox rows to Kafka (the outbox relay).")


@app.command("run")
@fail_on_fleet_error
def run(
    store_url: Annotated[
        str,
        typer.Option("--store-url", help="Store URL (sqlite:///path or postgresql+psycopg://...)."),
    ],
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's rows.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 500,
    delivery_timeout: Annotated[
        float,
        typer.Option(
            "--delivery-timeout",
            help="Seconds before an unconfirmed delivery is reported (it keeps waiting, in order).",
        ),
    ] = 10.0,
    metrics_port: MetricsPortOpt = None,
    metrics_address: MetricsAddressOpt = LOOPBACK,
    log_format: LogFormatOpt = LogFormat.TEXT,
    log_level: LogLevelOpt = LogLevel.INFO,
    retention: RetentionOpt = None,
    no_purge: NoPurgeOpt = False,
    bootstrap: BootstrapOpt = None,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Run the relay until SIGTERM/SIGINT; it purges its store's sent rows (--retention)."""
    bootstrap = bootstrap_from(bootstrap)
    from prometheus_client import CollectorRegistry

    from pipeline.bootstrap.reporters import build_relay
    from pipeline.bootstrap.retention import purger_for
    from pipeline.outbox.notify import listen
    from pipeline.retention.rules import RELAY_TABLES

    configure_logging(log_format, log_level)
    policy = retention_from(retention, no_purge=no_purge)
    registry = CollectorRegistry()
    relay = build_relay(
        store_url,
        bootstrap=bootstrap,
        tenant=tenant,
        batch_size=batch_size,
        delivery_timeout_s=delivery_timeout,
        registry=registry,
        factories=kafka_factories(kafka_config, kafka_property, check=bootstrap),
    )
    engine = relay.engine
    serve_metrics(registry, port=metrics_port, address=metrics_address)
    stop = threading.Event()
    if policy is not None:  # its own thread: the relay's never waits for more than one batch
        purger_for(engine, policy, RELAY_TABLES, registry=registry).start(stop)
    stop_on_signals(stop, then=[relay.wake])  # its idle wait may not look at stop at once
    console.print(f"outbox relay: {store_url} -> {bootstrap} (tenant: {tenant or 'all'})")
    listen(engine, relay.wake, stop)  # PostgreSQL: woken by each commit's NOTIFY
    try:
        relay.run_forever(stop)
    finally:
        engine.dispose()
    console.print("outbox relay: stopped")
