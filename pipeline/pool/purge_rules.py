"""Retention rules of a worker pool's tables: step effects ``pool_effects_s`` after the step
ended, and members stale by the status command's rule (three beats missed) and older than
``pool_members_stale_s``; a member still beating is never purged."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from .tables import effects_table, members_table


def _pool_effects(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return effects_table.c.ended_ms < now - ms(p.pool_effects_s)


def _pool_members(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = members_table.c
    return and_(c.beat_ms + 3 * c.period_ms < now, c.beat_ms < now - ms(p.pool_members_stale_s))


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.POOL_EFFECTS,
        table=effects_table,
        condition=_pool_effects,
        age=effects_table.c.started_ms,
    ),
    PurgeRule(
        name=StoreTable.POOL_MEMBERS,
        table=members_table,
        condition=_pool_members,
        age=members_table.c.beat_ms,
    ),
)
