"""The outbox's retention rule: a row goes once SENT (or DROPPED) and ``outbox_sent_s`` old.

PENDING and FAILED rows are unsent and never purged (docs/store.md).
"""

from __future__ import annotations

from sqlalchemy import ColumnElement

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable

from .tables import RowStatus, outbox


def _outbox(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    cutoff = now / 1000.0 - p.outbox_sent_s  # outbox times are epoch seconds
    c = outbox.c
    return ((c.status == int(RowStatus.SENT)) & (c.sent_at < cutoff)) | (
        (c.status == int(RowStatus.DROPPED)) & (c.created_at < cutoff)
    )


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.OUTBOX,
        table=outbox,
        condition=_outbox,
        age=outbox.c.created_at,
        age_scale=1000.0,
    ),
)
