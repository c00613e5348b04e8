"""The outbox's retention rule: a row goes once sent (or DROPPED) and ``outbox_sent_s`` old.

Sent is ``SENT``, or ``PENDING`` at or below its branch's watermark (:mod:`.sent`); such a row
has no per-row ``sent_at``, so its age is counted from ``created_at``. Rows above the watermark
and FAILED rows are unsent and never purged (docs/store.md).
"""

from __future__ import annotations

from sqlalchemy import ColumnElement

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable

from .sent import watermark
from .tables import RowStatus, outbox


def _outbox(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    cutoff = now / 1000.0 - p.outbox_sent_s  # outbox times are epoch seconds
    c = outbox.c
    return (
        ((c.status == int(RowStatus.SENT)) & (c.sent_at < cutoff))
        | ((c.status == int(RowStatus.DROPPED)) & (c.created_at < cutoff))
        | ((c.status == int(RowStatus.PENDING)) & (c.created_at < cutoff) & (c.lsn <= watermark()))
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
