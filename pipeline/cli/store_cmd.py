"""``fleet store upgrade`` and ``fleet store current`` -- the store's schema version (Alembic)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import ConfigError

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="The SQL store's schema: show its version, upgrade it.")

Url = Annotated[
    str | None,
    typer.Option("--url", help="Store URL (sqlite:///path or postgresql+psycopg://...)."),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="A host's fleet.toml (its store_url).")
]


def _url(url: str | None, config: Path | None) -> str:
    if (url is None) == (config is None):
        raise ConfigError("give exactly one of --url and --config")
    if url is not None:
        return url
    from pipeline.gateway.config import load_config

    assert config is not None
    return load_config(config).store_url


@app.command()
@fail_on_fleet_error
def upgrade(
    url: Url = None,
    config: ConfigOpt = None,
    revision: Annotated[str, typer.Option("--to", help="Target revision.")] = "head",
) -> None:
    """Bring the store's schema to the newest revision (a v0.1.0 store is adopted first)."""
    from pipeline.store import make_engine
    from pipeline.store.schema import upgrade as run_upgrade

    engine = make_engine(_url(url, config), create=False)
    try:
        before, after = run_upgrade(engine, revision)
    finally:
        engine.dispose()
    console.print(f"store schema: {before or 'unversioned'} -> {after}")


@app.command()
@fail_on_fleet_error
def current(
    url: Url = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show the store's schema revision and this code's head. Exit 1 when they differ."""
    from pipeline.store import make_engine
    from pipeline.store.schema import schema_state

    engine = make_engine(_url(url, config), create=False)
    try:
        state = schema_state(engine)
    finally:
        engine.dispose()
    if as_json:
        emit_json({"current": state.current, "head": state.head, "empty": state.empty})
    else:
        shown = "empty" if state.empty else (state.current or "v0.1.0 (unversioned)")
        console.print(f"current: {shown}\nhead:    {state.head}")
    if not state.at_head:
        raise typer.Exit(1)


@app.command(hidden=True)
@fail_on_fleet_error
def revision(
    message: Annotated[str, typer.Option("--message", "-m", help="What the revision changes.")],
    rev_id: Annotated[str | None, typer.Option("--rev-id", help="e.g. 0002_effects")] = None,
) -> None:
    """(Developers) Generate a revision from the tables the code declares (docs/store.md)."""
    import tempfile

    from pipeline.store import make_engine
    from pipeline.store.schema import new_revision

    with tempfile.TemporaryDirectory() as scratch:
        engine = make_engine(f"sqlite:///{scratch}/head.sqlite")  # a fresh store at head
        try:
            path = new_revision(engine, message, rev_id=rev_id)
        finally:
            engine.dispose()
    console.print(f"wrote {path}: read it, fix what autogenerate cannot know, then commit it")
