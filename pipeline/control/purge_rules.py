"""Retention rules of the control plane's tables.

``fleet_spawns`` and ``fleet_stops`` are the dedupe of the control topic (a repeated SPAWN or STOP
finds its row), so finished rows keep the dedupe horizon, ``dedupe_s``; launching, live and
stopping rows are never purged. The requester's tracking rows go once settled and past due.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, func

from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable, ms

from . import requests, spawns, stops


def _spawns(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = spawns.spawns_table.c
    ended = func.coalesce(c.ended_ms, c.created_ms)  # refused/failed rows never ran
    return and_(c.state.in_(spawns.FINISHED), ended < now - ms(p.dedupe_s))


def _stops(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = stops.stops_table.c
    return and_(c.state.in_(stops.FINISHED), c.created_ms < now - ms(p.dedupe_s))


def _stop_requests(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = requests.stop_requests_table.c
    return and_(c.state != requests.PENDING, c.deadline_ms < now - ms(p.tracking_finished_s))


def _spawn_requests(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = requests.spawn_requests_table.c
    return and_(c.state != requests.PENDING, c.deadline_ms < now - ms(p.tracking_finished_s))


RULES: tuple[PurgeRule, ...] = (
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
    PurgeRule(
        name=StoreTable.SPAWN_REQUESTS,
        table=requests.spawn_requests_table,
        condition=_spawn_requests,
        age=requests.spawn_requests_table.c.sent_ms,
    ),
)
