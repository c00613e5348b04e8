"""The host store's retention rules: forward tracking, the inject journal, held rows, turns and
waiters. Each condition names a finished state (settled, closed, drained, past expiry), so a row
in use never matches whatever the retention (docs/store.md)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from . import inject_journal as journal
from . import tracking
from .conversations import WAITING, turns_table, waiters_table
from .held import held_table


def _tracking(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = tracking.forward_table.c
    return and_(c.state != tracking.PENDING, c.deadline_ms < now - ms(p.tracking_finished_s))


def _journal(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = journal.journal_table.c  # closed_ms < x: the closed rows' partial index
    return and_(c.state != journal.OPEN, c.closed_ms < now - ms(p.tracking_finished_s))


def _held(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = held_table.c
    return and_(c.drained_at_ms.is_not(None), c.drained_at_ms < now - ms(p.held_drained_s))


def _turns(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = turns_table.c
    return and_(c.state != WAITING, c.expires_at_ms < now - ms(p.turns_closed_s))


def _waiters(now: int, _p: RetentionConfig) -> ColumnElement[bool]:
    return waiters_table.c.expires_ms < now  # a crashed poller's row: its own expiry


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.TRACKING,
        table=tracking.forward_table,
        condition=_tracking,
        age=tracking.forward_table.c.sent_ms,
    ),
    PurgeRule(
        name=StoreTable.INJECT_JOURNAL,
        table=journal.journal_table,
        condition=_journal,
        age=journal.journal_table.c.opened_ms,
    ),
    PurgeRule(name=StoreTable.HELD, table=held_table, condition=_held, age=held_table.c.held_at_ms),
    PurgeRule(
        name=StoreTable.TURNS, table=turns_table, condition=_turns, age=turns_table.c.opened_ms
    ),
    PurgeRule(
        name=StoreTable.WAITERS,
        table=waiters_table,
        condition=_waiters,
        age=waiters_table.c.opened_ms,
    ),
)
