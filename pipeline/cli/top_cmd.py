"""``fleet top``: a live view of one host or the whole fleet, refreshed every second.

Reads through :class:`~pipeline.observability.fleet_view.FleetReaders` (the exporter's lag
sampler and store reads); draws with :mod:`.top_view`; runs in :func:`.live.run_live`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.errors import ConfigError

from .login import BootstrapOpt, KafkaConfigOpt, KafkaPropertyOpt, kafka_factories
from .output import console, emit_json, fail_on_fleet_error

if TYPE_CHECKING:
    from pipeline.observability.fleet_view import FleetReaders

app = typer.Typer()


@app.command()
@fail_on_fleet_error
def top(
    *,
    config: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            "-c",
            help="A host's fleet.toml: read its store (held, in-flight, injecting per entity, "
            "STALE state, outbox, quarantine). Repeat for several hosts.",
        ),
    ] = None,
    bootstrap: BootstrapOpt = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="Topic prefix (default: the first config's).")
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Start on this host alone.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print JSON.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes.")] = 1.0,
    kafka_config: KafkaConfigOpt = None,
    kafka_property: KafkaPropertyOpt = None,
) -> None:
    """A live view of one host or the whole fleet: hosts and their STALE state, entities with
    held, in-flight and injecting counts, lag, DLQ depth and age, outbox, quarantine, pools.

    Keys: s sort, r reverse, / filter, h one host / all, c clear, q quit.

    ``--once --json`` prints one snapshot (schema in docs/observability.md)."""
    from .top_view import TopState, render

    readers, close = _readers(config or [], bootstrap, prefix, kafka_config, kafka_property)
    try:
        if once:
            snap = readers.snapshot()
            if as_json:
                emit_json(snap.as_json())
            else:
                console.print(render(snap, TopState(host=host)))
            return
        from .live import run_live

        state = TopState(host=host)
        latest = [readers.snapshot()]

        def refresh() -> None:
            latest[0] = readers.snapshot()

        run_live(
            refresh,
            lambda: render(latest[0], state),
            interval_s=interval,
            on_key=lambda key: state.key(key, [h.host for h in latest[0].hosts]),
        )
    finally:
        close()


def _readers(
    configs: list[Path],
    bootstrap: str | None,
    prefix: str | None,
    kafka_config: Path | None,
    kafka_property: list[str] | None,
) -> tuple[FleetReaders, Callable[[], None]]:
    from pipeline.host.config import load_config
    from pipeline.kafka.settings import admin_config
    from pipeline.kafka.topics import TopicNames
    from pipeline.observability import KafkaOffsetReader, LagSampler, SamplerConfig
    from pipeline.observability.fleet_view import FleetReaders, HostSource, Members
    from pipeline.observability.pool_members import group_members
    from pipeline.observability.store_reader import StoreReader
    from pipeline.store import make_engine

    cfgs = [load_config(path) for path in configs]
    server = bootstrap or (cfgs[0].bootstrap if cfgs else None)  # the option reads the env
    if not cfgs and not server:
        raise ConfigError(
            "fleet top needs a host's store (--config) or a broker (--bootstrap, $KAFKA_BOOTSTRAP)"
        )
    topics = TopicNames(prefix=prefix or (cfgs[0].topic_prefix if cfgs else "fleet."))
    hosts = [
        HostSource(
            host=c.host,
            reader=StoreReader(make_engine(c.store_url, create=False)),
            entities=tuple((e.gid, str(e.role), str(e.delivery)) for e in c.entities),
        )
        for c in cfgs
    ]
    reader: KafkaOffsetReader | None = None
    sampler: LagSampler | None = None
    members: Members | None = None
    if server:
        factories = kafka_factories(kafka_config, kafka_property, check=server)
        if cfgs and kafka_config is None:
            factories = factories.secured(cfgs[0].kafka)
        reader = KafkaOffsetReader(
            server, admin_factory=factories.admin, consumer_factory=factories.consumer
        )
        sampler = LagSampler(
            reader,
            SamplerConfig(groups_prefix=topics.prefix, dlq_topic=topics.dlq, rate_window_s=10.0),
        )
        admin = factories.admin(admin_config(server))

        def members(groups: Sequence[str]) -> dict[str, list[str]]:
            return group_members(admin, groups)

    def close() -> None:
        for h in hosts:
            h.reader.close()
        if reader is not None:
            reader.close()

    return FleetReaders(sampler=sampler, hosts=hosts, topics=topics, members=members), close
