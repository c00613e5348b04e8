"""``fleet outbox status`` -- backlog, oldest unsent age and per-branch positions."""

from __future__ import annotations

from typing import Annotated

import typer

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Inspect the transactional outbox.")


@app.command()
@fail_on_fleet_error
def status(
    store_url: Annotated[
        str,
        typer.Option("--store-url", help="Store URL (sqlite:///path or postgresql+psycopg://...)."),
    ],
    tenant: Annotated[str | None, typer.Option("--tenant")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Pending rows, the age of the oldest one, and each branch's next lsn."""
    from rich.table import Table

    from pipeline.outbox import outbox_status
    from pipeline.store import make_engine

    engine = make_engine(store_url)
    try:
        st = outbox_status(engine, tenant=tenant)
    finally:
        engine.dispose()
    if as_json:
        emit_json(st.to_dict())
        return
    age = "-" if st.oldest_unsent_age_s is None else f"{st.oldest_unsent_age_s:.1f}s"
    console.print(f"backlog: {st.backlog} row(s), oldest unsent: {age}")
    table = Table()
    for col in ("tenant", "branch", "next lsn", "pending", "abandoned"):
        table.add_column(col)
    for b in st.branches:
        table.add_row(
            b.tenant, b.branch_key, str(b.next_lsn), str(b.pending), "yes" if b.abandoned else ""
        )
    console.print(table)
