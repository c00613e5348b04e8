"""``fleet trace MSGID``: everything the local stores know about one message, in time order."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import ConfigError

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer()


@app.command()
@fail_on_fleet_error
def trace(
    msg_id: Annotated[str, typer.Argument(metavar="MSGID", help="The message's msgId.")],
    *,
    config: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            "-c",
            help="A host's fleet.toml whose store to read; repeat "
            "for several hosts (the sender's and the recipient's).",
        ),
    ] = None,
    store_url: Annotated[
        list[str] | None,
        typer.Option(
            "--store-url",
            help="A store to read (sqlite:///path or postgresql+psycopg://...); repeatable.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Everything the local stores know about one message, in time order: the outbox row and
    its relay, tracked deadline, receipt, held and drained, inject journal, INJECTED / FAILED,
    dead-lettered; with the trace id to paste into a tracing UI.

    Exit code 1 when no store knows the message."""
    from pipeline.control.requests import SPAWN, STOP
    from pipeline.host.config import load_config
    from pipeline.host.tracking import FORWARD
    from pipeline.observability.message_trail import message_trail, order_key
    from pipeline.store import make_engine

    stores = [(c.host, c.store_url) for c in map(load_config, config or [])]
    stores += [(url.rsplit("/", 1)[-1], url) for url in store_url or []]
    if not stores:
        raise ConfigError("fleet trace needs a store: pass --config or --store-url")
    events = []
    for where, url in stores:
        engine = make_engine(url, create=False)
        try:
            events.extend(
                message_trail(engine, msg_id, where=where, tracked=(FORWARD, SPAWN, STOP))
            )
        finally:
            engine.dispose()
    events.sort(key=order_key)
    traces = sorted({e.trace_id for e in events if e.trace_id})
    if as_json:
        emit_json({"msg_id": msg_id, "trace_id": traces[0] if traces else None,
                   "trace_ids": traces, "events": [e.as_json() for e in events]})  # fmt: skip
    else:
        console.print(f"msgId   {msg_id}")
        console.print(f"traceId {', '.join(traces) or '(unknown)'}")
        for e in events:
            at = datetime.fromtimestamp(e.at_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
            console.print(
                f"{at}  {e.where:<10} {e.what:<9} {e.detail}", markup=False, highlight=False
            )
        if not events:
            console.print("no store knows this message")
    if not events:
        raise typer.Exit(1)
