"""``fleet exporter`` and ``fleet lag`` -- consumer lag in messages and seconds."""

from __future__ import annotations

import math
import signal
import threading
import time
from typing import Annotated

import typer

from pipeline.errors import BrokerError
from pipeline.observability import (
    ExporterConfig,
    KafkaOffsetReader,
    LagSampler,
    SamplerConfig,
    Thresholds,
)
from pipeline.observability.model import LagStatus, worst
from pipeline.signals import stop_on_signals

from .login import (
    BootstrapOpt,
    KafkaConfigOpt,
    KafkaPropertyOpt,
    bootstrap_from,
    kafka_factories,
    stop_on_refused_login,
)
from .logs import LogFormat, LogFormatOpt, LogLevel, LogLevelOpt, configure_logging
from .output import console, emit_json, fail_on_fleet_error
from .serving import MetricsAddressOpt

app = typer.Typer()

Prefix = Annotated[
    str, typer.Option("--groups-prefix", help="Only consumer groups whose id starts with this.")
]
Dlq = Annotated[str, typer.Option("--dlq-topic", help="Dead-letter topic ('' = none).")]


@app.command()
@fail_on_fleet_error
def exporter(
    *,
    bootstrap: BootstrapOpt = None,
    metrics_port: Annotated[
        int, typer.Option("--metrics-port", help="HTTP port for /metrics.")
    ] = 9308,
    metrics_address: MetricsAddressOpt = "0.0.0.0",
    log_format: LogFormatOpt = LogFormat.TEXT,
    log_level: LogLevelOpt = LogLevel.INFO,
    groups_prefix: Prefix = "fleet.",
    interval: Annotated[float, typer.Option("--interval", help="Seconds between samples.")] = 15.0,
    dlq_topic: Dlq = "fleet.dlq",
    store_url: Annotated[
        list[str] | None,
        typer.Option(
            "--store-url",
            help="Store to read held messages, quarantined keys and the outbox backlog from "
            "(sqlite:///path or postgresql+psycopg://...); repeat for several stores (summed).",
        ),
    ] = None,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Serve Prometheus metrics: lag (messages, seconds), retention risk, DLQ depth, and with
    ``--store-url`` held messages, quarantined keys, outbox backlog and oldest unsent age."""
    from pipeline.bootstrap.reporters import build_exporter

    configure_logging(log_format, log_level)
    server = bootstrap_from(bootstrap)
    running = build_exporter(
        ExporterConfig(
            bootstrap=server,
            port=metrics_port,
            address=metrics_address,
            sampler=SamplerConfig(
                groups_prefix=groups_prefix, dlq_topic=dlq_topic or None, interval_s=interval
            ),
        ),
        store_urls=store_url,
        factories=(factories := kafka_factories(kafka_config, kafka_property, check=server)),
    )
    console.print(f"fleet exporter on http://{metrics_address}:{running.port}/metrics")
    done = threading.Event()
    refused = stop_on_refused_login(factories, done)
    stop_on_signals(done, (signal.SIGTERM,))
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    if refused:
        raise refused[0]


@app.command()
@fail_on_fleet_error
def lag(
    *,
    bootstrap: BootstrapOpt = None,
    groups_prefix: Prefix = "fleet.",
    slo: Annotated[float, typer.Option("--slo", help="Time-lag SLO in seconds.")] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON.")] = False,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            help="Seconds between two samples to measure consume and arrival rates for the "
            "time to drain (0 = one sample, no drain time).",
        ),
    ] = 3.0,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Per group/topic/partition: committed, log end, lag, lag seconds, retention risk, status;
    per group: time to drain the lag at the measured rates ("never" if it cannot).

    Exit code 1 when any partition is LOST or AT_RISK."""
    server = bootstrap_from(bootstrap)
    factories = kafka_factories(kafka_config, kafka_property, check=server)
    reader = KafkaOffsetReader(
        server, admin_factory=factories.admin, consumer_factory=factories.consumer
    )
    try:
        sampler = LagSampler(
            reader, SamplerConfig(groups_prefix=groups_prefix, dlq_topic=None, rate_window_s=window)
        )
        sample = sampler.sample()
        if window > 0 and sample.broker_ok:
            time.sleep(window)
            sample = sampler.sample()
    finally:
        reader.close()
    if not sample.broker_ok:
        raise BrokerError(sample.errors[0] if sample.errors else "broker unreachable")
    thresholds = Thresholds(lag_seconds_slo=slo)
    rows: list[dict[str, object]] = [
        {
            "group": r.group,
            "topic": r.topic,
            "partition": r.partition,
            "current_offset": r.committed,
            "log_start_offset": r.log_start,
            "log_end_offset": r.log_end,
            "lag": r.lag_messages,
            "lag_seconds": round(r.lag_seconds, 3),
            "retention_risk": round(r.retention_risk_ratio, 4),
            "lost": r.lost_messages,
            "status": r.status(thresholds).value,
        }
        for r in sample.partitions
    ]
    drain = {g.group: g.drain_seconds for g in sample.drains}
    for row in rows:
        row["drain_seconds"] = _drain_text(drain.get(str(row["group"])))
    groups = [
        {
            "group": g.group,
            "lag": g.lag_messages,
            "consume_rate": g.consume_rate,
            "arrival_rate": g.arrival_rate,
            "drain_seconds": _drain_text(g.drain_seconds),
        }
        for g in sample.drains
    ]
    overall = worst([r.status(thresholds) for r in sample.partitions])
    if as_json:
        emit_json({"status": overall.value, "partitions": rows, "groups": groups})
    else:
        _table(rows)
    if overall in (LagStatus.LOST, LagStatus.AT_RISK):
        raise typer.Exit(1)


def _drain_text(seconds: float | None) -> str | float | None:
    """R-OBS-3: a lag that cannot drain "never" does; unknown rates print "-"."""
    if seconds is None:
        return None
    return "never" if math.isinf(seconds) else round(seconds, 1)


def _table(rows: list[dict[str, object]]) -> None:
    """Plain aligned columns like ``kafka-consumer-groups --describe``: never truncated, greppable."""
    if not rows:
        console.print("no consumer groups with committed offsets match the prefix")
        return
    cols = {
        "GROUP": "group",
        "TOPIC": "topic",
        "PARTITION": "partition",
        "CURRENT-OFFSET": "current_offset",
        "LOG-END-OFFSET": "log_end_offset",
        "LAG": "lag",
        "LAG-SECONDS": "lag_seconds",
        "RETENTION-RISK": "retention_risk",
        "STATUS": "status",
        "GROUP-DRAIN-S": "drain_seconds",
    }
    cells = [list(cols)] + [
        [("-" if row[k] is None else str(row[k])) for k in cols.values()] for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    for line in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
