"""``fleet quarantine ls | release KEY`` -- see and lift per-key quarantines.

Release only FILES a request; the consumer that owns the key's partition executes it in its own
loop (so replayed and new records of the key never interleave) and marks it done. By default the
command waits for that, with a timeout.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from pipeline.errors import ConfigError, FleetError
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.reasons import Failure
from pipeline.store import make_engine

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Per-key quarantine: list keys, release one.", no_args_is_help=True)

StoreUrl = Annotated[str, typer.Option("--store-url", envvar="FLEET_STORE_URL", help="Store URL.")]
Group = Annotated[str | None, typer.Option("--group", help="Consumer group of the scope.")]
Topic = Annotated[str | None, typer.Option("--topic", help="Topic of the scope.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _when(ms: int | None) -> str:
    return (
        "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
    )


@app.command("ls")
@fail_on_fleet_error
def ls(
    store_url: StoreUrl, group: Group = None, topic: Topic = None, as_json: Json = False
) -> None:
    """List quarantined keys with their reason, dead letter and parked-record count."""
    engine = make_engine(store_url)
    try:
        entries = QuarantineStore(engine).list()
    finally:
        engine.dispose()
    entries = [
        e
        for e in entries
        if (group is None or e.scope.group == group) and (topic is None or e.scope.topic == topic)
    ]
    if as_json:
        emit_json([e.as_dict() for e in entries])
        return
    from rich.table import Table

    table = Table(title=f"{len(entries)} quarantined key(s)")
    for col in ("group", "topic", "key", "partition", "reason", "parked", "since", "dead letter"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            e.scope.group,
            e.src_topic if e.scope.topic == "*" else e.scope.topic,
            e.key,
            str(e.partition),
            e.reason,
            str(e.parked),
            _when(e.quarantined_ms),
            e.dead_letter_ref,
        )
    console.print(table)


@app.command()
@fail_on_fleet_error
def release(
    key: Annotated[str, typer.Argument(help="The quarantined record key.")],
    *,
    store_url: StoreUrl,
    group: Group = None,
    topic: Topic = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="File the request and return.")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 120.0,
    as_json: Json = False,
) -> None:
    """Ask the owning consumer to replay KEY's dead letter and parked records, then lift it."""
    engine = make_engine(store_url)
    try:
        store = QuarantineStore(engine)
        scopes = [
            s
            for s in store.scopes_of(key)
            if (group is None or s.group == group) and (topic is None or s.topic == topic)
        ]
        if group is not None and topic is not None:
            scopes = [Scope(group, topic)]
        if len(scopes) != 1:
            raise ConfigError(
                f"key {key!r} is quarantined in {len(scopes)} matching scope(s); "
                "name one with --group and --topic",
                reason=Failure.NOT_QUARANTINED if not scopes else Failure.AMBIGUOUS_SCOPE,
            )
        rid = store.request_release(scopes[0], key)
        status = store.release_status(rid)
        deadline = time.monotonic() + timeout
        while not no_wait and status.state == "PENDING" and time.monotonic() < deadline:
            time.sleep(0.2)
            status = store.release_status(rid)
    finally:
        engine.dispose()
    if as_json:
        emit_json({"request": rid, "key": key, "state": status.state, "note": status.note})
    else:
        console.print(f"release request {rid} for {key!r}: {status.state} {status.note}".rstrip())
    if status.state == "FAILED":
        raise FleetError(f"release of {key!r} failed: {status.note}", reason=Failure.RELEASE_FAILED)
    if status.state == "PENDING" and not no_wait:
        raise FleetError(
            f"release of {key!r} not executed within {timeout}s: is a consumer of "
            f"{scopes[0].group} running and owning partition {status.partition}? "
            f"(request {rid} stays filed)",
            reason=Failure.RELEASE_TIMEOUT,
            retriable=True,
        )
