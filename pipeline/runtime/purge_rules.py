"""The dedupe table's retention rule: a row goes once ``dedupe_s`` old (the horizon rule,
docs/store.md); inside the horizon it is what makes a redelivery a duplicate."""

from __future__ import annotations

from sqlalchemy import ColumnElement

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from .dedupe import dedupe_table


def _dedupe(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return dedupe_table.c.seen_at_ms < now - ms(p.dedupe_s)


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.DEDUPE,
        table=dedupe_table,
        condition=_dedupe,
        age=dedupe_table.c.seen_at_ms,
    ),
)
