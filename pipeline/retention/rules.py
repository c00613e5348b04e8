"""What may be purged from each bounded table, and what never is.

One :class:`PurgeRule` per table: the condition a row must meet to be deleted, given ``now`` and
the :class:`~pipeline.retention.policy.RetentionConfig`. Every condition names a *finished*
state, so a row in use can never match, whatever the retention:

======================  ==========================================  =============================
table                   purged once                                  never purged
======================  ==========================================  =============================
outbox                  SENT/DROPPED, ``outbox_sent_s`` old          PENDING, FAILED (unsent)
fleet_forward_sends     settled, ``tracking_finished_s`` past due    pending
fleet_failed_reported   ``failed_reported_s`` old (a dedupe)         --
fleet_held              drained ``held_drained_s`` ago               undrained
fleet_turns             closed, ``turns_closed_s`` past expiry       waiting
fleet_dedupe            ``dedupe_s`` old (the horizon rule)          inside the horizon
fleet_waiters           past their own expiry                        open pulls
fleet_idempotency       past the key class's ``expires_at_ms``       keys kept forever
fleet_spawns            reaped/failed/refused, ``dedupe_s`` ended    launching, live, stopping
fleet_stops             done/refused, ``dedupe_s`` old               stopping
fleet_stop_requests     settled, ``tracking_finished_s`` past due    pending
======================  ==========================================  =============================

``fleet_spawns`` and ``fleet_stops`` are the dedupe of the control topic (a repeated SPAWN or
STOP finds its row), so they keep the dedupe horizon, ``dedupe_s``: seed 001's rule already holds
it above the control topic's retention + the replay window.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, ColumnElement, Table, and_, func

from pipeline.control import requests, spawns, stops
from pipeline.effects.tables import expired, idempotency
from pipeline.failures.reporter import reported_table
from pipeline.gateway import tracking
from pipeline.gateway.conversations import WAITING, turns_table, waiters_table
from pipeline.gateway.held import held_table
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.runtime.dedupe import dedupe_table

from .policy import RetentionConfig


class StoreTable(enum.StrEnum):
    """The bounded tables (metric label values: a closed set)."""

    OUTBOX = "outbox"
    TRACKING = "fleet_forward_sends"
    FAILED_REPORTED = "fleet_failed_reported"
    HELD = "fleet_held"
    TURNS = "fleet_turns"
    DEDUPE = "fleet_dedupe"
    WAITERS = "fleet_waiters"
    IDEMPOTENCY = "fleet_idempotency"
    SPAWNS = "fleet_spawns"
    STOPS = "fleet_stops"
    STOP_REQUESTS = "fleet_stop_requests"


Condition = Callable[[int, RetentionConfig], ColumnElement[bool]]


@dataclass(frozen=True, kw_only=True)
class PurgeRule:
    """``condition(now_ms, policy)``: the rows of ``table`` that may go. ``age`` is the column
    the oldest-row age is read from, in milliseconds (``age_scale`` converts: 1000 for a column
    in seconds)."""

    name: StoreTable
    table: Table
    condition: Condition
    age: Column[int] | Column[float]
    age_scale: float = 1.0

    @property
    def keys(self) -> tuple[Column[object], ...]:
        return tuple(self.table.primary_key.columns)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _outbox(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    cutoff = now / 1000.0 - p.outbox_sent_s  # outbox times are epoch seconds
    c = outbox.c
    return ((c.status == int(RowStatus.SENT)) & (c.sent_at < cutoff)) | (
        (c.status == int(RowStatus.DROPPED)) & (c.created_at < cutoff)
    )


def _tracking(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = tracking.forward_table.c
    return and_(c.state != tracking.PENDING, c.deadline_ms < now - _ms(p.tracking_finished_s))


def _reported(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return reported_table.c.reported_ms < now - _ms(p.failed_reported_s)


def _held(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = held_table.c
    return and_(c.drained_at_ms.is_not(None), c.drained_at_ms < now - _ms(p.held_drained_s))


def _turns(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = turns_table.c
    return and_(c.state != WAITING, c.expires_at_ms < now - _ms(p.turns_closed_s))


def _dedupe(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return dedupe_table.c.seen_at_ms < now - _ms(p.dedupe_s)


def _waiters(now: int, _p: RetentionConfig) -> ColumnElement[bool]:
    return waiters_table.c.expires_ms < now  # a crashed poller's row: its own expiry


def _idempotency(now: int, _p: RetentionConfig) -> ColumnElement[bool]:
    # the key class published the retention when the key was written (pipeline.effects)
    return expired(now)


def _spawns(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = spawns.spawns_table.c
    ended = func.coalesce(c.ended_ms, c.created_ms)  # refused/failed rows never ran
    return and_(c.state.in_(spawns.FINISHED), ended < now - _ms(p.dedupe_s))


def _stops(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = stops.stops_table.c
    return and_(c.state.in_(stops.FINISHED), c.created_ms < now - _ms(p.dedupe_s))


def _stop_requests(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = requests.stop_requests_table.c
    return and_(c.state != requests.PENDING, c.deadline_ms < now - _ms(p.tracking_finished_s))


RULES: tuple[PurgeRule, ...] = (
    PurgeRule(
        name=StoreTable.OUTBOX,
        table=outbox,
        condition=_outbox,
        age=outbox.c.created_at,
        age_scale=1000.0,
    ),
    PurgeRule(
        name=StoreTable.TRACKING,
        table=tracking.forward_table,
        condition=_tracking,
        age=tracking.forward_table.c.sent_ms,
    ),
    PurgeRule(
        name=StoreTable.FAILED_REPORTED,
        table=reported_table,
        condition=_reported,
        age=reported_table.c.reported_ms,
    ),
    PurgeRule(name=StoreTable.HELD, table=held_table, condition=_held, age=held_table.c.held_at_ms),
    PurgeRule(
        name=StoreTable.TURNS, table=turns_table, condition=_turns, age=turns_table.c.opened_ms
    ),
    PurgeRule(
        name=StoreTable.DEDUPE,
        table=dedupe_table,
        condition=_dedupe,
        age=dedupe_table.c.seen_at_ms,
    ),
    PurgeRule(
        name=StoreTable.WAITERS,
        table=waiters_table,
        condition=_waiters,
        age=waiters_table.c.opened_ms,
    ),
    PurgeRule(
        name=StoreTable.IDEMPOTENCY,
        table=idempotency,
        condition=_idempotency,
        age=idempotency.c.created_at_ms,
    ),
    PurgeRule(
        name=StoreTable.SPAWNS,
        table=spawns.spawns_table,
        condition=_spawns,
        age=spawns.spawns_table.c.created_ms,
    ),
    PurgeRule(
        name=StoreTable.STOPS,
        table=stops.stops_table,
        condition=_stops,
        age=stops.stops_table.c.created_ms,
    ),
    PurgeRule(
        name=StoreTable.STOP_REQUESTS,
        table=requests.stop_requests_table,
        condition=_stop_requests,
        age=requests.stop_requests_table.c.sent_ms,
    ),
)
