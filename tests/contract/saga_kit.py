"""The refund saga of R-SAGA-1 (payments, inventory, a carrier) as test participants.

Every action and compensation writes one row to ``test_saga_effects``: counting rows per
``(saga, step, phase)`` is how the tests prove nothing was applied twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.effects import (
    SAGA_KEY_CLASS,
    IdempotencyStore,
    KeyClass,
    Participant,
    SagaDefinition,
    SagaStep,
    SagaTopics,
    StepFailed,
)

kit_meta = MetaData()
saga_effects = Table(
    "test_saga_effects",
    kit_meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("saga_id", String(255), nullable=False),
    Column("name", String(64), nullable=False),
    Column("phase", String(16), nullable=False),
)

REFUND = SagaDefinition(
    name="refund",
    steps=(
        SagaStep(name="hold_payment", participant="payments"),
        SagaStep(name="restock", participant="inventory"),
        SagaStep(name="book_pickup", participant="carrier"),
    ),
    max_compensation_attempts=3,
    compensation_backoff_s=0.0,  # at once: drain() alone runs a saga to its end
)
OWNERS = {s.name: s.participant for s in REFUND.steps}
Fails = Callable[[str, str, dict[str, Any]], bool]  # (name, phase, payload) -> fail now?


def idem_store() -> IdempotencyStore:
    return IdempotencyStore([KeyClass(name=SAGA_KEY_CLASS, retention_s=None, replay_window_s=None)])


def participants(topics: SagaTopics, store: IdempotencyStore, fails: Fails) -> list[Participant]:
    def fn(name: str, phase: str) -> Callable[[Session, dict[str, Any]], Any]:
        def run(session: Session, payload: dict[str, Any]) -> Any:
            session.execute(
                insert(saga_effects).values(saga_id=payload["saga_id"], name=name, phase=phase)
            )
            if fails(name, phase, payload):
                raise StepFailed(f"{name} {phase} refused")
            return {"done": name}

        return run

    out = []
    for owner in sorted(set(OWNERS.values()) - {None}):
        names = [n for n, o in OWNERS.items() if o == owner]
        out.append(
            Participant(
                str(owner),
                actions={n: fn(n, "action") for n in names},
                compensations={n: fn(n, "compensate") for n in names},
                idempotency=store,
                topics=topics,
            )
        )
    return out


def seeded_failures(seed: int, p_success: float) -> Fails:
    rng = random.Random(seed)

    def fails(_name: str, phase: str, _payload: dict[str, Any]) -> bool:
        return phase == "action" and rng.random() >= p_success

    return fails


def effect_counts(engine: Engine) -> dict[tuple[str, str, str], int]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                saga_effects.c.saga_id, saga_effects.c.name, saga_effects.c.phase, func.count()
            ).group_by(saga_effects.c.saga_id, saga_effects.c.name, saga_effects.c.phase)
        )
        return {(s, n, p): int(c) for s, n, p, c in rows}
