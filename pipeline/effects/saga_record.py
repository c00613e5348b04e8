"""Load and save the one row a saga lives in (``FOR UPDATE``: transitions never interleave)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.errors import ConfigError, StoreError
from pipeline.reasons import Saga

from .saga_model import Phase, SagaState
from .saga_tables import saga


@dataclass
class SagaRecord:
    saga_id: str
    definition: str
    state: SagaState
    step: int
    phase: Phase
    attempt: int
    payload: dict[str, Any]
    results: dict[str, Any]
    compensations: int
    deadline_ms: int | None
    error: str | None
    history: list[list[Any]] = field(default_factory=list)
    created_at_ms: int = 0
    updated_at_ms: int = 0
    version: int = 0

    def note(self, now_ms: int, what: str) -> None:
        self.history.append([now_ms, what])

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["state"], d["phase"], d["pending"] = (
            self.state.value,
            self.phase.value,
            self.state.pending,
        )
        return d


def _from_row(row: Any) -> SagaRecord:
    return SagaRecord(
        saga_id=row.saga_id,
        definition=row.definition,
        state=SagaState(row.state),
        step=int(row.step),
        phase=Phase(row.phase),
        attempt=int(row.attempt),
        payload=json.loads(row.payload),
        results=json.loads(row.results),
        compensations=int(row.compensations),
        deadline_ms=None if row.deadline_ms is None else int(row.deadline_ms),
        error=row.error,
        history=json.loads(row.history),
        created_at_ms=int(row.created_at_ms),
        updated_at_ms=int(row.updated_at_ms),
        version=int(row.version),
    )


def load(session: Session, saga_id: str, *, lock: bool = True) -> SagaRecord:
    stmt = select(saga).where(saga.c.saga_id == saga_id)
    row = session.execute(stmt.with_for_update() if lock else stmt).first()
    if row is None:
        raise ConfigError(f"no saga {saga_id!r}", reason=Saga.SAGA_UNKNOWN)
    return _from_row(row)


def save(session: Session, rec: SagaRecord, now_ms: int) -> None:
    result = session.execute(
        update(saga)
        .where(saga.c.saga_id == rec.saga_id, saga.c.version == rec.version)
        .values(
            state=rec.state.value,
            step=rec.step,
            phase=rec.phase.value,
            attempt=rec.attempt,
            results=json.dumps(rec.results),
            compensations=rec.compensations,
            deadline_ms=rec.deadline_ms,
            error=rec.error,
            history=json.dumps(rec.history),
            updated_at_ms=now_ms,
            version=rec.version + 1,
        )
    )
    if int(getattr(result, "rowcount", 0) or 0) != 1:
        raise StoreError(f"saga {rec.saga_id} changed under us (version {rec.version})")
    rec.version += 1


def list_sagas(
    session: Session, *, state: SagaState | None = None, limit: int = 100
) -> list[SagaRecord]:
    stmt = select(saga)
    if state is not None:
        stmt = stmt.where(saga.c.state == state.value)
    stmt = stmt.order_by(saga.c.updated_at_ms.desc()).limit(limit)
    return [_from_row(r) for r in session.execute(stmt)]


def state_counts(session: Session) -> dict[SagaState, int]:
    """Sagas by state (the human-queue depth is ``[SagaState.HUMAN]``)."""
    rows = session.execute(select(saga.c.state, func.count()).group_by(saga.c.state))
    counts = {s: 0 for s in SagaState}
    for state, n in rows:
        counts[SagaState(state)] = int(n)
    return counts
