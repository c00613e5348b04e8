"""``fleet pool run | submit | status`` -- worker pools (``docs/pools.md``).

``run`` parses flags and calls :func:`pipeline.bootstrap.build_pool_member`; SIGTERM/SIGINT stop
it gracefully (in-flight steps finish or are given up within ``--revoke-wait``, offsets are
committed, the member leaves the group).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from pipeline import reasons
from pipeline.errors import ConfigError
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
from .serving import (
    LOOPBACK,
    MetricsAddressOpt,
    MetricsPortOpt,
    NoPurgeOpt,
    RetentionOpt,
    retention_from,
    serve_metrics,
)

app = typer.Typer(help="Worker pools: members of consumer group fleet.pool.<NAME>.")

Pool = Annotated[str, typer.Option("--pool", help="Pool name: topic and group fleet.pool.<NAME>.")]


@app.command("run")
@fail_on_fleet_error
def run(
    pool: Pool,
    bootstrap: BootstrapOpt = None,
    store_url: Annotated[
        str, typer.Option("--store-url", envvar="FLEET_STORE_URL", help="Dedupe/result store URL.")
    ] = "sqlite:///fleet-pool.sqlite",
    handler: Annotated[
        str | None, typer.Option("--handler", help="Step function module:function(record).")
    ] = None,
    command: Annotated[
        str | None, typer.Option("--command", help="Shell step: value on stdin, stdout = result.")
    ] = None,
    sleep: Annotated[
        str | None,
        typer.Option(
            "--sleep",
            help="Built-in simulated step: SECONDS | uniform:LO:HI | exp:MEAN | "
            "lognormal:MEAN:SIGMA (a JSON value's step_s wins).",
        ),
    ] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiplies --sleep.")] = 1.0,
    instance_id: Annotated[
        str | None, typer.Option("--instance-id", help="group.instance.id (static membership).")
    ] = None,
    static: Annotated[
        bool | None,
        typer.Option(
            "--static/--no-static", help="Static membership (default: iff --instance-id)."
        ),
    ] = None,
    member: Annotated[
        str | None, typer.Option("--member", help="Name in logs/effects (default: id or pid).")
    ] = None,
    assignment: Annotated[
        str, typer.Option("--assignment", help="range | roundrobin | cooperative-sticky.")
    ] = "cooperative-sticky",
    concurrency: Annotated[
        str, typer.Option("--concurrency", help="partition (default) | key.")
    ] = "partition",
    max_poll_records: Annotated[
        int, typer.Option("--max-poll-records", min=1, help="Records held uncommitted, at most.")
    ] = 50,
    max_in_flight: Annotated[
        int, typer.Option("--max-in-flight", min=1, help="Worker threads (steps at once).")
    ] = 64,
    partition_buffer: Annotated[
        int | None, typer.Option("--partition-buffer", min=1, help="Records held per partition.")
    ] = None,
    max_poll_interval_ms: Annotated[int, typer.Option("--max-poll-interval-ms", min=1)] = 300_000,
    session_timeout_ms: Annotated[int, typer.Option("--session-timeout-ms", min=1)] = 10_000,
    dedupe: Annotated[
        bool, typer.Option("--dedupe/--no-dedupe", help="Dedupe rows and stored-result reuse.")
    ] = True,
    revoke_wait: Annotated[
        float, typer.Option("--revoke-wait", help="Seconds a revoke/stop waits for steps.")
    ] = 30.0,
    step_lease: Annotated[
        float,
        typer.Option(
            "--step-lease",
            min=0.1,
            help="Seconds a claimed step key stays held without a heartbeat (renewed every "
            "third of it while the step runs); a killed member's steps move after it.",
        ),
    ] = 30.0,
    partitions: Annotated[
        int, typer.Option("--partitions", min=1, help="Only when the topic must be created.")
    ] = 6,
    retry: Annotated[
        str | None,
        typer.Option(
            "--retry",
            help="Failed-step backoff BASE_S:FACTOR:ATTEMPTS[:JITTER] (1:2:6:0 waits 1, 2, 4, 8, "
            "16 s); default 0.2:2:5:0.2.",
        ),
    ] = None,
    events: Annotated[
        Path | None, typer.Option("--events", help="Append one JSON line per step here.")
    ] = None,
    start_at: Annotated[
        float | None,
        typer.Option(
            "--start-at",
            help="Join the group at this time (epoch seconds), started up and warmed up before: "
            "the lab's replacement members.",
        ),
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
    """Run one pool member until SIGTERM/SIGINT; it purges its own store (--retention)."""
    bootstrap = bootstrap_from(bootstrap)
    from pipeline.bootstrap.pools import build_pool_member
    from pipeline.bootstrap.tracing import install_tracing
    from pipeline.hooks import hooks_from_fault
    from pipeline.pool import Assignment, PoolConfig
    from pipeline.pool.config import parse_retry
    from pipeline.pool.steps import CommandStep, SleepStep, StepFn, load_handler
    from pipeline.runtime.lanes import Concurrency
    from pipeline.runtime.retry import BackoffPolicy
    from pipeline.tracing import settings_from_env

    chosen = [x for x in (handler, command, sleep) if x is not None]
    if len(chosen) != 1:
        raise ConfigError(
            "give exactly one of --handler, --command, --sleep", reason=reasons.Pool.INVALID_HANDLER
        )
    step: StepFn
    if handler is not None:
        step = load_handler(handler)
    elif command is not None:
        step = CommandStep(command)
    else:
        step = SleepStep(sleep or "0", scale=time_scale)
    try:
        strategy, mode = Assignment(assignment), Concurrency(concurrency)
    except ValueError as exc:
        raise ConfigError(str(exc), reason=reasons.Pool.INVALID_OPTION) from exc
    name = member or instance_id or f"{os.uname().nodename}-{os.getpid()}"
    if static is None:
        static = instance_id is not None
    configure_logging(log_format, log_level)
    parts = build_pool_member(
        PoolConfig(
            pool=pool,
            bootstrap=bootstrap,
            store_url=store_url,
            member=name,
            instance_id=(instance_id or name) if static else None,
            assignment=strategy,
            concurrency=mode,
            max_poll_records=max_poll_records,
            max_in_flight=max_in_flight,
            partition_buffer=partition_buffer,
            max_poll_interval_ms=max_poll_interval_ms,
            session_timeout_ms=session_timeout_ms,
            dedupe=dedupe,
            revoke_wait_s=revoke_wait,
            partitions=partitions,
            events_path=str(events) if events else None,
            step_lease_s=step_lease,
            retention=retention_from(retention, no_purge=no_purge),
            retry=parse_retry(retry) if retry is not None else BackoffPolicy(),
        ),
        step=step,
        factories=(factories := kafka_factories(kafka_config, kafka_property, check=bootstrap)),
        # tests only: the chaos suite's planted bugs and crash points (pipeline/hooks.py)
        hooks=hooks_from_fault(os.environ.get("FLEET_FAULT"), os.environ.get("FLEET_FAULT_AT")),
    )
    serve_metrics(parts.registry, port=metrics_port, address=metrics_address)
    stop = threading.Event()
    refused = stop_on_refused_login(factories, stop)
    stop_on_signals(stop)
    logging.getLogger("pipeline.pool").info("member %s of pool %s running", name, pool)
    # fleet.pool.step spans when OTEL_* says so (docs/observability.md, "Tracing")
    stop_tracing = install_tracing(settings_from_env(os.environ), host=f"pool.{pool}")
    try:
        parts.run(stop, join_at=start_at)
    finally:
        parts.engine.dispose()
        stop_tracing()
    if refused:
        raise refused[0]
    logging.getLogger("pipeline.pool").info("member %s stopped", name)


@app.command("submit")
@fail_on_fleet_error
def submit(
    pool: Pool,
    bootstrap: BootstrapOpt = None,
    file: Annotated[
        Path | None, typer.Argument(help="One record per line (default: stdin).")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Key every line with this (else key<TAB>body).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the msgIds as JSON.")] = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Produce records to the pool topic, each with a fresh msgId (its event id)."""
    bootstrap = bootstrap_from(bootstrap)
    from pipeline.kafka.topics import TopicNames
    from pipeline.pool.submit import submit as do_submit

    topic = TopicNames().pool(pool)
    producer = kafka_factories(kafka_config, kafka_property, check=bootstrap).producer
    if file is None:
        ids = do_submit(bootstrap, topic, sys.stdin, key=key, producer_factory=producer)
    else:
        with file.open(encoding="utf-8") as lines:
            ids = do_submit(bootstrap, topic, lines, key=key, producer_factory=producer)
    if json_out:
        emit_json({"topic": topic, "msg_ids": ids})
    else:
        console.print(f"submitted {len(ids)} record(s) to {topic}")


@app.command("status")
@fail_on_fleet_error
def status(
    pool: Pool,
    bootstrap: BootstrapOpt = None,
    store_url: Annotated[
        str | None,
        typer.Option(
            "--store-url",
            envvar="FLEET_STORE_URL",
            help="The members' store: adds each member's in-flight steps (lanes rows).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Members, assignment, in-flight steps per member, committed offset and lag per partition."""
    bootstrap = bootstrap_from(bootstrap)
    from rich.table import Table

    from pipeline.pool.status import pool_status

    admin = kafka_factories(kafka_config, kafka_property, check=bootstrap).admin
    st = pool_status(bootstrap, pool, store_url=store_url, admin_factory=admin)
    if json_out:
        emit_json(st.to_json())
        return
    console.print(
        f"pool {st.pool}  group {st.group}  state {st.state}  assignor {st.assignor or '-'}  "
        f"members {len(st.members)}  lag {st.total_lag}"
    )
    for m, ps in sorted(st.members.items()):
        lanes = st.lanes.get(m)
        busy = ""
        if lanes is not None:
            oldest = lanes.oldest_running_s
            busy = f"  running {lanes.running}" + (
                f" (oldest {oldest:.1f} s)" if oldest is not None else ""
            )
        console.print(f"  {m}: {ps}{busy}")
    for name, lanes in sorted(st.lanes.items()):
        if name not in st.members:
            state = "stale" if lanes.stale else "not in the group"
            console.print(f"  {name}: {state}, last beat {lanes.beat_age_s:.1f} s ago")
    table = Table("PARTITION", "MEMBER", "COMMITTED", "LOG-END", "LAG")
    for r in st.partitions:
        table.add_row(
            str(r.partition),
            r.member or "-",
            "-" if r.committed is None else str(r.committed),
            str(r.log_end),
            str(r.lag),
        )
    console.print(table)
