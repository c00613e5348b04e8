"""``fleet gateway run`` and the entity commands ``fleet send|ask|answer|abandon|poll|mcp``.

The config loader, the envelope and the store are imported by the functions that use them:
``fleet send --help`` (or a mistyped option) answers without loading any of them.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.errors import ConfigError, DeliveryError
from pipeline.reasons import Config
from pipeline.signals import stop_on_signals

from . import hot
from .exits import EXIT_FATAL, EXIT_REFUSED, exit_code
from .lean import CONFIG_ENV, TRACE_ENV
from .login import (
    BootstrapOverrideOpt,
    KafkaConfigOverrideOpt,
    KafkaPropertyOpt,
    config_security,
)
from .logs import LogFormat, LogFormatOpt, LogLevel, LogLevelOpt, configure_logging
from .output import console, err_console, fail_on_fleet_error
from .serving import LOOPBACK, MetricsAddressOpt, MetricsPortOpt, serve_metrics

if TYPE_CHECKING:
    from pipeline.envelope import Signer
    from pipeline.gateway.client import GatewayClient
    from pipeline.host.gateway_config import GatewayConfig

app = typer.Typer(help="Run a host's gateway: the per-host inbox with the dual ack model.")

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", envvar=CONFIG_ENV, help="The host's fleet.toml.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
TraceOpt = Annotated[
    str | None,
    typer.Option(
        "--trace",
        envvar=TRACE_ENV,
        help="Continue this trace (a traceId); an injected worker's FLEET_TRACE_ID by default.",
    ),
]

# CPython's GIL switch interval in a gateway process (docs/gateway.md "Latency"): 1 ms, not 5
GATEWAY_SWITCH_INTERVAL_S = 0.001


def _load(config: Path, **overrides: str | None) -> GatewayConfig:
    from pipeline.host.config import load_config

    return load_config(config, overrides=overrides or None)


def _load_for_kafka(
    config: Path,
    host: str | None,
    bootstrap: str | None,
    kafka_config: Path | None,
    kafka_property: list[str] | None,
) -> GatewayConfig:
    """The host's config with the command line's -b, --command-config and -X over the file's
    bootstrap and [kafka] login (docs/cli.md "Connecting")."""
    cfg = _load(config, host=host, bootstrap=bootstrap)
    if kafka_config is not None or kafka_property:
        cfg = replace(cfg, kafka=config_security(cfg.kafka, kafka_config, kafka_property))
    return cfg


def _signer(cfg: GatewayConfig) -> Signer:
    from pipeline.envelope import Signer

    if not cfg.key_file:
        raise ConfigError(
            f"{cfg.host}: key_file is not set (create one: fleet keys init --host {cfg.host})",
            reason=Config.CONFIG_MISSING_KEY,
        )
    return Signer.load(cfg.key_file)


@app.command("run")
@fail_on_fleet_error
def run(
    config: ConfigOpt,
    host: Annotated[str | None, typer.Option(help="Host id (overrides the file).")] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_address: MetricsAddressOpt = LOOPBACK,
    log_format: LogFormatOpt = LogFormat.TEXT,
    log_level: LogLevelOpt = LogLevel.INFO,
    bootstrap: BootstrapOverrideOpt = None,
    kafka_config: KafkaConfigOverrideOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Run the gateway until SIGTERM/SIGINT; exits 3 when fenced or on a fatal error.

    -b, --command-config and -X replace the file's bootstrap and [kafka] login."""
    from pipeline.bootstrap.gateway import build_gateway
    from pipeline.envelope import TrustStore
    from pipeline.hooks import hooks_from_fault
    from pipeline.observability.health import gateway_health, notify_when_ready
    from pipeline.support import sd_notify
    from pipeline.tracing import settings_from_env

    configure_logging(log_format, log_level)
    # the gateway's threads hand the GIL over at every store call, inject and poll: a thread
    # back from one waits for a busy one's switch interval (5 ms by default)
    sys.setswitchinterval(GATEWAY_SWITCH_INTERVAL_S)
    cfg = _load_for_kafka(config, host, bootstrap, kafka_config, kafka_property)
    if not cfg.trust_dir:
        raise ConfigError("trust_dir is not set", reason=Config.CONFIG_MISSING_TRUST)
    parts = build_gateway(
        cfg,
        signer=_signer(cfg),
        trust=TrustStore.load(cfg.trust_dir),
        hooks=hooks_from_fault(os.environ.get("FLEET_FAULT"), os.environ.get("FLEET_FAULT_AT")),
        tracing=settings_from_env(os.environ),  # OTEL_*: docs/observability.md, "Tracing"
    )
    health = gateway_health(
        stop=parts.gateway.stop_event,
        fatal=lambda: parts.gateway.fatal,
        runtime=parts.runtime,
        roster=parts.roster,
        engine=parts.engine,
    )
    serve_metrics(parts.registry, port=metrics_port, address=metrics_address, health=health)
    gw = parts.gateway.start()
    stop_on_signals(gw.stop_event)  # never Event.set() inside a handler: pipeline/signals.py
    # SIGUSR2 writes every thread's stack to stderr, even while a thread holds the GIL: what a
    # supervisor asks for before it SIGKILLs a gateway that did not stop (docs/gateway.md)
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    console.print(f"gateway {cfg.host} running (inbox {parts.runtime.config.topics[0]})")
    notify_when_ready(health, gw.stop_event, status=f"gateway {cfg.host}")  # Type=notify units
    fatal = gw.wait()
    sd_notify.stopping()
    gw.stop()
    if fatal is not None:
        err_console.print(f"[bold red]gateway {cfg.host} stopped:[/] {fatal}")
        raise typer.Exit(EXIT_FATAL)


@app.command("leave")
@fail_on_fleet_error
def leave(
    config: ConfigOpt,
    as_json: JsonOpt = False,
    bootstrap: BootstrapOverrideOpt = None,
    kafka_config: KafkaConfigOverrideOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """Leave the fleet for good: tombstone every entry of this host (a stop only announces them
    away for ``away_grace_s``). Run it once the gateway has stopped."""
    from typing import cast

    from pipeline.bootstrap.client import Factories
    from pipeline.envelope import TrustStore
    from pipeline.kafka.settings import producer_config
    from pipeline.kafka.topics import TopicNames
    from pipeline.presence import RosterFollower, RosterView
    from pipeline.presence.leave import bound_to, tombstone_all
    from pipeline.presence.publisher import ProducerLike

    cfg = _load_for_kafka(config, None, bootstrap, kafka_config, kafka_property)
    running = hot.connect(cfg)
    if running is not None:
        running.close()
        err_console.print(
            f"[bold red]gateway {cfg.host} is running:[/] stop it (SIGTERM) first; it would "
            "announce its entities again at its next heartbeat"
        )
        raise typer.Exit(EXIT_REFUSED)
    if not cfg.trust_dir:
        raise ConfigError("trust_dir is not set", reason=Config.CONFIG_MISSING_TRUST)
    factories = Factories().secured(cfg.kafka)
    topics = TopicNames(prefix=cfg.topic_prefix)
    view = RosterView.build(trust=TrustStore.load(cfg.trust_dir), topics=topics)
    follower = RosterFollower(
        bootstrap=cfg.bootstrap, view=view, topics=topics, consumer_factory=factories.consumer
    )
    try:
        gids = bound_to(follower, cfg.host)
    finally:
        follower.stop()
    producer = cast("ProducerLike", factories.producer(producer_config(cfg.bootstrap)))
    tombstone_all(producer, gids, signer=_signer(cfg), follower=follower)
    if as_json:
        from .output import emit_json

        emit_json({"host": cfg.host, "tombstoned": gids})
    else:
        console.print(
            f"{cfg.host} left the fleet: {len(gids)} entries tombstoned ({', '.join(gids)})"
        )


def send(
    config: ConfigOpt,
    sender: Annotated[str, typer.Option("--from", help="A local entity's gid.")],
    to: Annotated[str, typer.Option("--to", help="Recipient gid.")],
    body: Annotated[str | None, typer.Argument(help="Body text, or - for stdin.")] = None,
    kind: Annotated[str, typer.Option(help="SEND or REPLY.")] = "SEND",
    ttl: Annotated[float | None, typer.Option(help="Seconds until expiresAt.")] = None,
    trace: TraceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a message (works while the broker is down: it is queued in the outbox).

    Through the gateway's local socket when it runs (it signs and commits the send); else
    straight into the host's store, as the gateway would.
    """
    cfg = _load(config)
    try:
        msg_id, trace_id, kind, via = _send(cfg, sender, to, hot.read_body(body), kind, ttl, trace)
    except DeliveryError as exc:  # e.g. UNKNOWN_RECIPIENT, RECIPIENT_GONE: refused at once
        if not as_json:
            raise
        hot.refused_json(exc, to)
        raise typer.Exit(exit_code(exc)) from exc
    hot.sent(msg_id=msg_id, trace_id=trace_id, to=to, kind=kind, via=via, as_json=as_json)


def _send(
    cfg: GatewayConfig,
    sender: str,
    to: str,
    body: bytes,
    kind: str,
    ttl: float | None,
    trace: str | None = None,
) -> tuple[str, str, str, str]:
    """``(msg_id, trace_id, kind, via)`` of one send: through the gateway's socket when one
    answers (via ``gateway``; this process loads neither the store nor the envelope), else
    straight into the store (via ``store``)."""
    client = hot.connect(cfg)
    if client is not None:
        with client:
            queued = client.send(
                sender=sender, to=to, body=body, kind=kind, ttl_s=ttl, trace_id=trace
            )
        return queued.msg_id, queued.trace_id, kind.upper(), "gateway"
    from pipeline.gateway.socket_requests import parse_kind

    k = parse_kind(kind)
    env = _direct(cfg).send(sender=sender, to=to, body=body, kind=k, ttl_s=ttl, trace_id=trace)
    return env.msg_id, env.trace_id, k.value, "store"


def ask(
    config: ConfigOpt,
    sender: Annotated[str, typer.Option("--from")],
    to: Annotated[str, typer.Option("--to")],
    body: Annotated[str | None, typer.Argument()] = None,
    ttl: Annotated[float, typer.Option(help="Seconds the turn waits.")] = 120.0,
    trace: TraceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A worker asks a main; the answer is injected into the worker while its turn waits."""
    cfg, data = _load(config), hot.read_body(body)
    client = hot.connect(cfg)
    if client is not None:
        with client:
            q = client.ask(sender=sender, to=to, body=data, ttl_s=ttl, trace_id=trace)
        msg_id, turn_id = q.msg_id, q.turn_id
    else:
        env = _direct(cfg).ask(sender=sender, to=to, body=data, ttl_s=ttl, trace_id=trace)
        msg_id, turn_id = env.msg_id, env.turn_id
    hot.asked(msg_id=msg_id, turn_id=turn_id, to=to, as_json=as_json)


def answer(
    config: ConfigOpt,
    sender: Annotated[str, typer.Option("--from")],
    to: Annotated[str, typer.Option("--to")],
    turn: Annotated[str, typer.Option("--turn")],
    body: Annotated[str | None, typer.Argument()] = None,
    trace: TraceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer an ASK (TOO_LATE comes back if the asker's turn has ended)."""
    cfg, data = _load(config), hot.read_body(body)
    client = hot.connect(cfg)
    if client is not None:
        with client:
            msg_id = client.answer(
                sender=sender, to=to, turn_id=turn, body=data, trace_id=trace
            ).msg_id
    else:
        msg_id = (
            _direct(cfg).answer(sender=sender, to=to, turn_id=turn, body=data, trace_id=trace)
        ).msg_id
    hot.answered(msg_id=msg_id, turn_id=turn, as_json=as_json)


def abandon(
    config: ConfigOpt,
    sender: Annotated[str, typer.Option("--from", help="The asker (a local entity).")],
    to: Annotated[str, typer.Option("--to", help="Who was asked.")],
    turn: Annotated[str, typer.Option("--turn")],
    as_json: JsonOpt = False,
) -> None:
    """Give up a turn you asked: the asked side gets ABANDONED, a late ANSWER gets TOO_LATE."""
    cfg = _load(config)
    client = hot.connect(cfg)
    if client is not None:
        with client:
            msg_id = client.abandon(sender=sender, to=to, turn_id=turn).msg_id
    else:
        msg_id = _direct(cfg).abandon(sender=sender, to=to, turn_id=turn).msg_id
    hot.abandoned(msg_id=msg_id, turn_id=turn, as_json=as_json)


def _direct(cfg: GatewayConfig) -> GatewayClient:
    """The store written directly, as the gateway would (no gateway answers on its socket)."""
    from pipeline.bootstrap.client import build_client

    return build_client(cfg, signer=_signer(cfg))


def poll(
    config: ConfigOpt,
    recipient: Annotated[str, typer.Option("--as", help="The pulling entity's gid.")],
    sender: Annotated[str | None, typer.Option("--from", help="Only from this sender.")] = None,
    limit: Annotated[int, typer.Option()] = 100,
    wait: Annotated[float, typer.Option(help="Block up to this many seconds.")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Drain held messages (an open pull while waiting: ASKs surface here)."""
    cfg = _load(config)
    client = hot.connect(cfg)
    if client is not None:
        with client:
            got = client.poll(recipient, sender=sender, limit=limit, wait_s=wait)
        hot.polled(got["messages"], got["lines"], as_json=as_json)
        return
    from pipeline.gateway import render

    held = _direct(cfg).poll(recipient, sender=sender, limit=limit, wait_s=wait)
    messages, lines = [render.held_dict(m) for m in held], [render.held_line(m) for m in held]
    hot.polled(messages, lines, as_json=as_json)


def mcp(
    config: ConfigOpt,
    gid: Annotated[str, typer.Option("--as", help="The main's gid (a local pull entity).")],
) -> None:
    """Serve one main over MCP on stdio (send, ask, answer, abandon, broadcast, poll, roster)."""
    from pipeline.bootstrap.mcp import build_mcp_server

    from .logs import StderrHandler

    logging.basicConfig(level=logging.WARNING, handlers=[StderrHandler()])  # stdout: the protocol
    cfg = _load(config)
    trace = os.environ.get(TRACE_ENV) or None  # a worker's MCP continues its brief's trace
    build_mcp_server(cfg, signer=_signer(cfg), gid=gid, trace_default=trace).run("stdio")


def register(root: typer.Typer) -> None:
    for fn in (send, ask, answer, abandon, poll, mcp):
        root.command(fn.__name__)(fail_on_fleet_error(fn))
