"""``fleet dlq ls | show | replay | report`` -- the tools of the person who owns the DLQ."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from pipeline.errors import ConfigError
from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DeadLetterView
from pipeline.failures.quarantine import QuarantineStore
from pipeline.kafka.topics import TopicNames
from pipeline.reasons import Failure
from pipeline.record import key_text
from pipeline.signals import stop_on_signals
from pipeline.store import make_engine

from . import dlq_report
from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, bootstrap_from, kafka_factories
from .logs import LogFormat, LogFormatOpt, LogLevel, LogLevelOpt, configure_logging
from .output import console, emit_json, fail_on_fleet_error
from .serving import (
    LOOPBACK,
    MetricsAddressOpt,
    MetricsPortOpt,
    NoPurgeOpt,
    RetentionOpt,
    retention_from,
    serve_metrics,
)

app = typer.Typer(help="Inspect, replay and report the dead-letter topic.", no_args_is_help=True)

Prefix = Annotated[str, typer.Option("--prefix", help="Topic name prefix.")]
DlqTopic = Annotated[
    str | None, typer.Option("--dlq-topic", help="DLQ topic (default: <prefix>dlq).")
]
Reason = Annotated[str | None, typer.Option("--reason", help="Only this reason code.")]
Key = Annotated[str | None, typer.Option("--key", help="Only this record key.")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="At most this many.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _dlq(prefix: str, dlq_topic: str | None) -> str:
    return dlq_topic or TopicNames(prefix=prefix).dlq


def _scan(
    bootstrap: str, topic: str, kafka_config: Path | None, kafka_property: list[str] | None
) -> Iterator[DeadLetterView]:
    factories = kafka_factories(kafka_config, kafka_property, check=bootstrap)
    return dlq_ops.scan(bootstrap, topic, consumer_factory=factories.consumer)


def _views(
    bootstrap: str,
    topic: str,
    reason: str | None,
    key: str | None,
    limit: int | None,
    kafka_config: Path | None,
    kafka_property: list[str] | None,
) -> list[DeadLetterView]:
    views = _scan(bootstrap, topic, kafka_config, kafka_property)
    return list(dlq_ops.select(views, reason=reason, key=key, limit=limit))


@app.command("ls")
@fail_on_fleet_error
def ls(
    bootstrap: BootstrapOpt = None,
    *,
    prefix: Prefix = "fleet.",
    dlq_topic: DlqTopic = None,
    reason: Reason = None,
    key: Key = None,
    limit: Limit = None,
    as_json: Json = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """List dead letters in DLQ order: where each came from and why it failed."""
    views = _views(
        bootstrap_from(bootstrap),
        _dlq(prefix, dlq_topic),
        reason,
        key,
        limit,
        kafka_config,
        kafka_property,
    )
    if as_json:
        emit_json([v.as_dict() for v in views])
        return
    from rich.table import Table

    table = Table(title=f"{len(views)} dead letter(s) in {_dlq(prefix, dlq_topic)}")
    for col in ("ref", "key", "kind", "msgId", "reason", "from", "attempts", "source"):
        table.add_column(col)
    for v in views:
        c = v.context
        table.add_row(
            v.ref,
            key_text(v.key),
            v.kind or "",
            v.msg_id or "",
            v.reason,
            v.sender or "",
            str(c["attempts"]),
            f"{c['topic']}[{c['partition']}]@{c['offset']}",
        )
    console.print(table)


@app.command()
@fail_on_fleet_error
def show(
    ref: Annotated[str, typer.Argument(help="PARTITION:OFFSET or TOPIC:PARTITION:OFFSET.")],
    *,
    bootstrap: BootstrapOpt = None,
    prefix: Prefix = "fleet.",
    dlq_topic: DlqTopic = None,
    body: Annotated[bool, typer.Option("--body", help="Also print the body (sensitive).")] = False,
    as_json: Json = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Show one dead letter: full context and original headers (body only with --body)."""
    parts = ref.split(":")
    if len(parts) == 3:
        dlq_topic, parts = parts[0], parts[1:]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"bad ref {ref!r}: use PARTITION:OFFSET or TOPIC:PARTITION:OFFSET")
    topic = _dlq(prefix, dlq_topic)
    want = (int(parts[0]), int(parts[1]))
    found = next(
        (
            v
            for v in _scan(bootstrap_from(bootstrap), topic, kafka_config, kafka_property)
            if (v.dlq_partition, v.dlq_offset) == want
        ),
        None,
    )
    if found is None:
        raise ConfigError(
            f"no dead letter at {topic}:{want[0]}:{want[1]}", reason=Failure.NOT_FOUND
        )
    data: dict[str, Any] = found.as_dict()
    if body:
        data["body"] = None if found.value is None else found.value.decode("utf-8", "replace")
    if as_json:
        emit_json(data)
        return
    for name, value in data.items():
        console.print(f"[bold]{name}[/]: {value}", highlight=False)


@app.command()
@fail_on_fleet_error
def replay(
    bootstrap: BootstrapOpt = None,
    *,
    prefix: Prefix = "fleet.",
    dlq_topic: DlqTopic = None,
    reason: Reason = None,
    key: Key = None,
    limit: Limit = None,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store-url", envvar="FLEET_STORE_URL", help="Store URL: skip quarantined keys."
        ),
    ] = None,
    as_json: Json = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Re-produce dead letters to their original topic, in DLQ order (per-key order kept).

    Same key, headers and body, so the same msgId: consumers' dedupe absorbs a second replay.
    A QUARANTINED key must be released with `fleet quarantine release` instead (its owner
    replays in order); with --store-url such keys are skipped and counted.
    """
    quarantined = _quarantined_keys(store_url) if store_url else set()
    skipped: list[DeadLetterView] = []

    def keep(views: Iterable[DeadLetterView]) -> Iterator[DeadLetterView]:
        for v in views:
            k = key_text(v.key)
            if {(k, str(v.context["topic"])), (k, "*")} & quarantined:
                skipped.append(v)
                continue
            yield v

    server = bootstrap_from(bootstrap)
    factories = kafka_factories(kafka_config, kafka_property, check=server)
    scanned = dlq_ops.scan(server, _dlq(prefix, dlq_topic), consumer_factory=factories.consumer)
    views = dlq_ops.select(scanned, reason=reason, key=key, limit=limit)
    result = dlq_ops.replay(keep(views), bootstrap=server, producer_factory=factories.producer)
    if as_json:
        emit_json(
            {"replayed": result.replayed, "by_topic": result.by_topic, "skipped": len(skipped)}
        )
    else:
        console.print(f"replayed {result.replayed} dead letter(s): {result.by_topic}")
        if skipped:
            console.print(
                f"skipped {len(skipped)} of quarantined keys: use fleet quarantine release"
            )


def _quarantined_keys(store_url: str) -> set[tuple[str, str]]:
    engine = make_engine(store_url)
    try:
        return {(e.key, e.scope.topic) for e in QuarantineStore(engine).list()}
    finally:
        engine.dispose()


@app.command()
@fail_on_fleet_error
def report(
    *,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="The reporting host's fleet.toml (the real sink)."),
    ] = None,
    bootstrap: BootstrapOpt = None,
    store_url: Annotated[
        str | None, typer.Option("--store-url", envvar="FLEET_STORE_URL", help="Store URL.")
    ] = None,
    sink_topic: Annotated[
        str | None,
        typer.Option("--sink-topic", help="Tests: write FAILED as plain records to this topic."),
    ] = None,
    prefix: Prefix = "fleet.",
    dlq_topic: DlqTopic = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Consumer group (default <prefix>dlq-reporter).")
    ] = None,
    relay: Annotated[
        bool,
        typer.Option(
            "--relay",
            help="With --config: also run an outbox relay here (only when no gateway runs on "
            "this host's store; the gateway's relay ships the FAILEDs otherwise).",
        ),
    ] = False,
    idle_exit: Annotated[
        float | None, typer.Option("--idle-exit", help="Exit after this many idle seconds.")
    ] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_address: MetricsAddressOpt = LOOPBACK,
    log_format: LogFormatOpt = LogFormat.TEXT,
    log_level: LogLevelOpt = LogLevel.INFO,
    retention: RetentionOpt = None,
    no_purge: NoPurgeOpt = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Run the FAILED reporter: one FAILED per eligible dead letter, even across kill -9.

    With --config the FAILED is a signed envelope to the sender's host inbox, written to this
    host's outbox in the transaction of the reporter's dedupe row. -b/--store-url/--sink-topic
    is the unsigned plain-record sink for tests and local runs. The login is --config's
    [kafka] table, or --command-config's (giving both with different logins is refused). It
    purges its reported rows past --config's [retention] (or --retention's).
    """
    from prometheus_client import CollectorRegistry

    from pipeline.bootstrap.retention import purger_for
    from pipeline.retention import RetentionConfig
    from pipeline.retention.rules import REPORTER_TABLES

    configure_logging(log_format, log_level)
    factories = kafka_factories(kafka_config, kafka_property)
    registry = CollectorRegistry()
    stop = threading.Event()
    stop_on_signals(stop, (signal.SIGTERM,))
    shipper: dlq_report.ReporterRelay | None = None
    base: RetentionConfig | None = None
    if config is not None:
        reporter, base = dlq_report.configured_reporter(
            config, group=group, dlq_topic=dlq_topic, factories=factories, registry=registry
        )
        shipper = (
            dlq_report.ReporterRelay.start(reporter.engine, config, factories=factories)
            if relay
            else None
        )
    else:
        reporter = dlq_report.plain_reporter(
            bootstrap,
            store_url,
            sink_topic,
            prefix=prefix,
            dlq_topic=dlq_topic,
            group=group,
            factories=factories,
            registry=registry,
        )
    policy = retention_from(retention, no_purge=no_purge, base=base)
    serve_metrics(registry, port=metrics_port, address=metrics_address)
    purging = threading.Event()
    if policy is not None:
        purger_for(reporter.engine, policy, REPORTER_TABLES, registry=registry).start(purging)
    try:
        emitted = reporter.run(should_stop=stop.is_set, idle_exit_s=idle_exit)
    finally:
        purging.set()
        reporter.consumer.close()
        if shipper is not None:
            shipper.finish()  # ship what this run staged before exiting
        reporter.engine.dispose()
    console.print(f"reported {emitted} FAILED")
