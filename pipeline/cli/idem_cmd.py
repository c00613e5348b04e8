"""``fleet idem ls | show KEY`` -- inspect idempotency keys and their stored results."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated

import typer

from pipeline.effects import KeyRecord, KeyState, find_key, list_keys
from pipeline.errors import ConfigError
from pipeline.reasons import Idempotency
from pipeline.store import make_engine, read_sessions

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Idempotency keys: list them, show one.", no_args_is_help=True)

StoreUrl = Annotated[str, typer.Option("--store-url", envvar="FLEET_STORE_URL", help="Store URL.")]
Klass = Annotated[str | None, typer.Option("--class", help="Key class.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _as_dict(r: KeyRecord) -> dict[str, object]:
    d = dataclasses.asdict(r)
    d["state"] = r.state.name.lower()
    return d


@app.command("ls")
@fail_on_fleet_error
def ls(
    store_url: StoreUrl,
    key_class: Klass = None,
    state: Annotated[
        str | None, typer.Option("--state", help="in_progress | succeeded | failed")
    ] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
    as_json: Json = False,
) -> None:
    """Newest keys first, with state, attempt and expiry."""
    wanted = None
    if state is not None:
        try:
            wanted = KeyState[state.upper()]
        except KeyError as exc:
            raise ConfigError("--state must be one of in_progress, succeeded, failed") from exc
    engine = make_engine(store_url)
    try:
        with read_sessions(engine)() as s:
            rows = list_keys(s, key_class=key_class, state=wanted, limit=limit)
    finally:
        engine.dispose()
    if as_json:
        emit_json([_as_dict(r) for r in rows])
        return
    from rich.table import Table

    table = Table()
    for col in ("class", "key", "state", "attempt", "created", "expires"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.key_class,
            r.key,
            r.state.name.lower(),
            str(r.attempt),
            _when(r.created_at_ms),
            _when(r.expires_at_ms),
        )
    console.print(table)


@app.command("show")
@fail_on_fleet_error
def show(
    key: Annotated[str, typer.Argument(help="The idempotency key.")],
    store_url: StoreUrl,
    key_class: Klass = None,
) -> None:
    """One key (every class holding it unless --class), with its stored result, as JSON."""
    engine = make_engine(store_url)
    try:
        with read_sessions(engine)() as s:
            rows = find_key(s, key, key_class=key_class)
    finally:
        engine.dispose()
    if not rows:
        raise ConfigError(f"no idempotency key {key!r}", reason=Idempotency.IDEM_KEY_UNKNOWN)
    emit_json([_as_dict(r) for r in rows])
