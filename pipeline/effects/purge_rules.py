"""Retention rules of the effects tables: idempotency keys past their key class's expiry (keys
kept forever never match) and sagas completed or aborted ``sagas_finished_s`` ago."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from .saga_model import SagaState
from .saga_tables import saga
from .tables import expired, idempotency


def _idempotency(now: int, _p: RetentionConfig) -> ColumnElement[bool]:
    # the key class published the retention when the key was written (docs/effects.md)
    return expired(now)


def _sagas(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = saga.c
    finished = c.state.in_((SagaState.COMPLETED.value, SagaState.ABORTED.value))
    return and_(finished, c.updated_at_ms < now - ms(p.sagas_finished_s))


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.IDEMPOTENCY,
        table=idempotency,
        condition=_idempotency,
        age=idempotency.c.created_at_ms,
    ),
    PurgeRule(name=StoreTable.SAGAS, table=saga, condition=_sagas, age=saga.c.created_at_ms),
)
