"""Retention rules of the failure tables: the FAILED reporter's dedupe rows and settled
quarantine release requests (PENDING ones are never purged)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from . import quarantine_model
from .quarantine_tables import release_table
from .reporter import reported_table


def _reported(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return reported_table.c.reported_ms < now - ms(p.failed_reported_s)


def _releases(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = release_table.c
    settled = c.state.in_((quarantine_model.DONE, quarantine_model.FAILED))
    return and_(settled, c.completed_ms < now - ms(p.quarantine_released_s))


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.FAILED_REPORTED,
        table=reported_table,
        condition=_reported,
        age=reported_table.c.reported_ms,
    ),
    PurgeRule(
        name=StoreTable.RELEASE_REQUESTS,
        table=release_table,
        condition=_releases,
        age=release_table.c.requested_ms,
    ),
)
