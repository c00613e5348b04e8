"""``fleet saga ls | show | resolve | retry | decide`` -- the sagas and their human queue.

``retry`` and ``decide`` send commands, so they need the saga definitions: ``--definitions
module:attr`` names a :class:`SagaDefinition` (or a list of them) the orchestrator runs with.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer

from pipeline.effects import (
    SagaDefinition,
    SagaOrchestrator,
    SagaState,
    SagaTopics,
    list_sagas,
    state_counts,
)
from pipeline.effects.saga_record import load
from pipeline.errors import ConfigError
from pipeline.reasons import Saga
from pipeline.store import make_engine, read_sessions, session_factory

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Sagas: list, show, and work the human queue.", no_args_is_help=True)

StoreUrl = Annotated[str, typer.Option("--store-url", envvar="FLEET_STORE_URL", help="Store URL.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
Prefix = Annotated[str, typer.Option("--prefix", help="Saga topic prefix.")]
Defs = Annotated[
    str | None,
    typer.Option("--definitions", help="module:attr of the SagaDefinition(s) (retry, decide)."),
]


def _definitions(spec: str | None) -> list[SagaDefinition]:
    if spec is None:
        return []
    module, _, attr = spec.partition(":")
    try:
        obj: Any = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--definitions {spec!r}: {exc}") from exc
    defs = [obj] if isinstance(obj, SagaDefinition) else list(obj)
    if not all(isinstance(d, SagaDefinition) for d in defs):
        raise ConfigError(f"--definitions {spec!r} is not a SagaDefinition or a list of them")
    return defs


@app.command("ls")
@fail_on_fleet_error
def ls(
    store_url: StoreUrl,
    state: Annotated[str | None, typer.Option("--state", help="e.g. human, running")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
    as_json: Json = False,
) -> None:
    """Sagas, newest change first; the summary line counts them by state."""
    wanted = None
    if state is not None:
        try:
            wanted = SagaState(state)
        except ValueError as exc:
            raise ConfigError(f"--state must be one of {[s.value for s in SagaState]}") from exc
    engine = make_engine(store_url)
    try:
        with read_sessions(engine)() as s:
            rows = list_sagas(s, state=wanted, limit=limit)
            counts = state_counts(s)
    finally:
        engine.dispose()
    if as_json:
        emit_json(
            {
                "counts": {k.value: v for k, v in counts.items()},
                "sagas": [r.to_dict() for r in rows],
            }
        )
        return
    from rich.table import Table

    console.print(", ".join(f"{k.value}: {v}" for k, v in counts.items()))
    table = Table()
    for col in ("saga", "definition", "state", "step", "phase", "attempt", "compensations"):
        table.add_column(col)
    for r in rows:
        state_s = r.state.value + (" (pending)" if r.state.pending else "")
        table.add_row(
            r.saga_id,
            r.definition,
            state_s,
            str(r.step),
            r.phase.value,
            str(r.attempt),
            str(r.compensations),
        )
    console.print(table)


@app.command("show")
@fail_on_fleet_error
def show(saga_id: Annotated[str, typer.Argument()], store_url: StoreUrl) -> None:
    """One saga's full record (state, results, history) as JSON."""
    engine = make_engine(store_url)
    try:
        with read_sessions(engine)() as s:
            rec = load(s, saga_id, lock=False)
    finally:
        engine.dispose()
    emit_json(rec.to_dict())


def _orchestrate(store_url: str, spec: str | None, prefix: str, fn: Any) -> None:
    engine = make_engine(store_url)
    try:
        orch = SagaOrchestrator(_definitions(spec), topics=SagaTopics(prefix=prefix))
        with session_factory(engine).begin() as s:
            fn(orch, s)
    finally:
        engine.dispose()


@app.command("resolve")
@fail_on_fleet_error
def resolve(
    saga_id: Annotated[str, typer.Argument()],
    store_url: StoreUrl,
    note: Annotated[str, typer.Option("--note", help="What the person did.")],
    prefix: Prefix = "fleet",
) -> None:
    """Take a saga out of the human queue as ABORTED, recording what was done by hand."""
    _orchestrate(store_url, None, prefix, lambda o, s: o.resolve(s, saga_id, note=note))
    console.print(f"saga {saga_id}: resolved (aborted)")


@app.command("retry")
@fail_on_fleet_error
def retry(
    saga_id: Annotated[str, typer.Argument()],
    store_url: StoreUrl,
    definitions: Defs = None,
    prefix: Prefix = "fleet",
) -> None:
    """Send a human-queue saga's failing compensation again, attempts reset."""
    _orchestrate(store_url, definitions, prefix, lambda o, s: o.retry(s, saga_id))
    console.print(f"saga {saga_id}: compensating again")


@app.command("decide")
@fail_on_fleet_error
def decide(
    saga_id: Annotated[str, typer.Argument()],
    store_url: StoreUrl,
    approve: Annotated[bool, typer.Option("--approve/--reject")],
    definitions: Defs = None,
    note: Annotated[str, typer.Option("--note")] = "",
    prefix: Prefix = "fleet",
) -> None:
    """Decide a waiting approval step (a late decision, after expiry, changes nothing)."""
    done: list[bool] = []
    _orchestrate(
        store_url,
        definitions,
        prefix,
        lambda o, s: done.append(o.decide(s, saga_id, approved=approve, note=note)),
    )
    if not done[0]:
        raise ConfigError(
            f"saga {saga_id} is not waiting for a decision", reason=Saga.SAGA_NOT_AWAITING
        )
    console.print(f"saga {saga_id}: {'approved' if approve else 'rejected'}")
