"""``fleet store``: the schema version (``upgrade``, ``current``) and bounded stores (``stats``,
``purge``; docs/store.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.errors import ConfigError

from .output import console, emit_json, fail_on_fleet_error

if TYPE_CHECKING:
    from pipeline.retention import RetentionConfig
    from pipeline.retention.purger import PurgeReport

app = typer.Typer(help="The SQL store: schema version, size per table, retention purges.")

StoreUrl = Annotated[
    str | None,
    typer.Option("--store-url", help="Store URL (sqlite:///path or postgresql+psycopg://...)."),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="A host's fleet.toml (its store_url).")
]


def _url(url: str | None, config: Path | None) -> str:
    return _target(url, config)[0]


def _target(url: str | None, config: Path | None) -> tuple[str, RetentionConfig]:
    """The store URL and its retention: the host's ``[retention]``, or the defaults for
    --store-url."""
    from pipeline.retention import RetentionConfig

    if (url is None) == (config is None):
        raise ConfigError("give exactly one of --store-url and --config")
    if url is not None:
        return url, RetentionConfig()
    from pipeline.host.config import load_config

    assert config is not None
    cfg = load_config(config)
    return cfg.store_url, cfg.retention


@app.command()
@fail_on_fleet_error
def upgrade(
    store_url: StoreUrl = None,
    config: ConfigOpt = None,
    revision: Annotated[str, typer.Option("--to", help="Target revision.")] = "head",
) -> None:
    """Bring the store's schema to the newest revision (a v0.1.0 store is adopted first)."""
    from pipeline.store import make_engine
    from pipeline.store.schema import upgrade as run_upgrade

    engine = make_engine(_url(store_url, config), create=False)
    try:
        before, after = run_upgrade(engine, revision)
    finally:
        engine.dispose()
    console.print(f"store schema: {before or 'unversioned'} -> {after}")


@app.command()
@fail_on_fleet_error
def current(
    store_url: StoreUrl = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show the store's schema revision and this code's head. Exit 1 when they differ."""
    from pipeline.store import make_engine
    from pipeline.store.schema import schema_state

    engine = make_engine(_url(store_url, config), create=False)
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


JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


@app.command()
@fail_on_fleet_error
def stats(store_url: StoreUrl = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Rows per table, the oldest row's age and the database's size (read-only)."""
    from rich.table import Table

    from pipeline.bootstrap.retention import RULES
    from pipeline.retention.stats import store_stats
    from pipeline.store import make_engine

    engine = make_engine(_url(store_url, config), create=False)  # a read: never changes the schema
    try:
        result = store_stats(engine, RULES)
    finally:
        engine.dispose()
    if as_json:
        emit_json(result.to_dict())
        return
    table = Table("TABLE", "ROWS", "OLDEST", title=f"{result.dialect} store")
    for t in result.tables:
        age = "-" if t.oldest_age_s is None else f"{t.oldest_age_s:.0f} s"
        table.add_row(t.table, str(t.rows), age)
    console.print(table)
    free = "" if result.free_bytes is None else f" ({_size(result.free_bytes)} free for reuse)"
    console.print(f"size: {_size(result.db_bytes)}{free}")


@app.command()
@fail_on_fleet_error
def purge(
    store_url: StoreUrl = None,
    config: ConfigOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be purged; delete nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete finished rows past their retention (the host's [retention], or the defaults),
    in small batches: safe beside a running gateway, which does the same every few minutes."""
    from pipeline.bootstrap.retention import RULES
    from pipeline.retention.purger import Purger
    from pipeline.store import make_engine

    url, policy = _target(store_url, config)
    engine = make_engine(url)
    try:
        purger = Purger(engine=engine, policy=policy, rules=RULES)
        report = purger.run(dry_run=dry_run)
        while not dry_run and report.total and _capped(report, policy):
            more = purger.run()  # a pass is bounded; the command goes on until nothing is left
            for name, n in more.rows.items():
                report.rows[name] = report.rows.get(name, 0) + n
            if not more.total:
                break
    finally:
        engine.dispose()
    rows = {table.value: n for table, n in report.rows.items()}
    if as_json:
        emit_json({"dry_run": dry_run, "rows": rows, "total": report.total})
        return
    verb = "would purge" if dry_run else "purged"
    for label, n in rows.items():
        console.print(f"{label:24} {verb} {n}")
    console.print(f"total: {verb} {report.total} row(s)")


def _capped(report: PurgeReport, policy: RetentionConfig) -> bool:
    """Whether some table may have hit the pass's cap (``max_batches * batch_rows``)."""
    cap = policy.max_batches * policy.batch_rows
    return any(n >= cap for n in report.rows.values())


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
