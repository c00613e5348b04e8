"""What may be purged from each bounded table, and what never is.

One :class:`PurgeRule` per table: the condition a row must meet to be deleted, given ``now`` and
the :class:`~pipeline.retention.policy.RetentionConfig`. Every condition names a *finished*
state, so a row in use can never match, whatever the retention:

======================  ==========================================  =============================
table                   purged once                                  never purged
======================  ==========================================  =============================
outbox                  SENT/DROPPED, ``outbox_sent_s`` old          PENDING, FAILED (unsent)
fleet_forward_sends     settled, ``tracking_finished_s`` past due    pending
fleet_inject_journal    closed ``tracking_finished_s`` ago           open (reported at restart)
fleet_failed_reported   ``failed_reported_s`` old (a dedupe)         --
fleet_held              drained ``held_drained_s`` ago               undrained
fleet_turns             closed, ``turns_closed_s`` past expiry       waiting
fleet_dedupe            ``dedupe_s`` old (the horizon rule)          inside the horizon
fleet_waiters           past their own expiry                        open pulls
fleet_idempotency       past the key class's ``expires_at_ms``       keys kept forever
fleet_spawns            reaped/failed/refused, ``dedupe_s`` ended    launching, live, stopping
fleet_stops             done/refused, ``dedupe_s`` old               stopping
fleet_stop_requests     settled, ``tracking_finished_s`` past due    pending
fleet_spawn_requests    settled, ``tracking_finished_s`` past due    pending
run_step, run_branch,   completed run, ``runs_completed_s`` since    running runs; a run with an
run                     its last change                              unsent outbox row
fleet_release_request   DONE/FAILED, ``quarantine_released_s`` ago   PENDING
fleet_saga              completed/aborted, ``sagas_finished_s`` ago  pending, HUMAN
fleet_pool_effects      ``pool_effects_s`` after the step ended      --
fleet_pool_members      beat ``pool_members_stale_s`` and 3 beats    a member still beating
                        ago
======================  ==========================================  =============================

``fleet_spawns`` and ``fleet_stops`` are the dedupe of the control topic (a repeated SPAWN or
STOP finds its row), so they keep the dedupe horizon, ``dedupe_s``: R-EFF-4 already holds
it above the control topic's retention + the replay window.

A run is three tables: its steps and branches go first, each while their run is finished, and the
run row last, once none of its steps or branches is left (a pass bounded by ``max_batches`` may
stop in between; the next one finishes). ``outbox_branch`` is never purged: it is one small row
per branch holding the lsn counter a downstream fold relies on (docs/store.md).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, ColumnElement, Table, and_, exists, func

from pipeline.control import requests, spawns, stops
from pipeline.effects.saga_model import SagaState
from pipeline.effects.saga_tables import saga
from pipeline.effects.tables import expired, idempotency
from pipeline.failures import quarantine_model
from pipeline.failures.quarantine_tables import release_table
from pipeline.failures.reporter import reported_table
from pipeline.gateway import journal, tracking
from pipeline.gateway.conversations import WAITING, turns_table, waiters_table
from pipeline.gateway.held import held_table
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.pool.tables import effects_table, members_table
from pipeline.runs.tables import run, run_branch, run_step
from pipeline.runtime.dedupe import dedupe_table

from .policy import RetentionConfig


class StoreTable(enum.StrEnum):
    """The bounded tables (metric label values: a closed set)."""

    OUTBOX = "outbox"
    TRACKING = "fleet_forward_sends"
    INJECT_JOURNAL = "fleet_inject_journal"
    FAILED_REPORTED = "fleet_failed_reported"
    HELD = "fleet_held"
    TURNS = "fleet_turns"
    DEDUPE = "fleet_dedupe"
    WAITERS = "fleet_waiters"
    IDEMPOTENCY = "fleet_idempotency"
    SPAWNS = "fleet_spawns"
    STOPS = "fleet_stops"
    STOP_REQUESTS = "fleet_stop_requests"
    SPAWN_REQUESTS = "fleet_spawn_requests"
    RUN_STEPS = "run_step"
    RUN_BRANCHES = "run_branch"
    RUNS = "run"
    RELEASE_REQUESTS = "fleet_release_request"
    SAGAS = "fleet_saga"
    POOL_EFFECTS = "fleet_pool_effects"
    POOL_MEMBERS = "fleet_pool_members"


Condition = Callable[[int, RetentionConfig], ColumnElement[bool]]


@dataclass(frozen=True, kw_only=True)
class PurgeRule:
    """``condition(now_ms, policy)``: the rows of ``table`` that may go. ``age`` is the column
    the oldest-row age is read from, in milliseconds (``age_scale`` converts: 1000 for a column
    in seconds; ``None``: the table keeps no time)."""

    name: StoreTable
    table: Table
    condition: Condition
    age: Column[int] | Column[float] | None
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


def _journal(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = journal.journal_table.c
    return and_(c.state != journal.OPEN, c.closed_ms < now - _ms(p.tracking_finished_s))


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


def _spawn_requests(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = requests.spawn_requests_table.c
    return and_(c.state != requests.PENDING, c.deadline_ms < now - _ms(p.tracking_finished_s))


def _run_finished(
    now: int, p: RetentionConfig, tenant: Column[str], run_id: Column[str]
) -> ColumnElement[bool]:
    """The run ``(tenant, run_id)`` completed ``runs_completed_s`` ago and has no unsent outbox
    row on any of its branches (a FAILED row stops its branch until an operator acts)."""
    r, b, o = run.c, run_branch.c, outbox.c
    unsent = exists().where(
        b.tenant == r.tenant,
        b.run_id == r.run_id,
        o.tenant == b.tenant,
        o.branch_key == b.branch_key,
        o.status.in_((int(RowStatus.PENDING), int(RowStatus.FAILED))),
    )
    return exists().where(
        r.tenant == tenant,
        r.run_id == run_id,
        r.status == "completed",
        r.updated_at < now / 1000.0 - p.runs_completed_s,  # run times are epoch seconds
        ~unsent,
    )


def _run_steps(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return _run_finished(now, p, run_step.c.tenant, run_step.c.run_id)


def _run_branches(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = run_branch.c
    no_steps = ~exists().where(run_step.c.tenant == c.tenant, run_step.c.run_id == c.run_id)
    return and_(_run_finished(now, p, c.tenant, c.run_id), no_steps)


def _runs(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = run.c
    children = [
        ~exists().where(t.c.tenant == c.tenant, t.c.run_id == c.run_id)
        for t in (run_step, run_branch)
    ]
    cutoff = now / 1000.0 - p.runs_completed_s
    return and_(c.status == "completed", c.updated_at < cutoff, *children)


def _releases(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = release_table.c
    settled = c.state.in_((quarantine_model.DONE, quarantine_model.FAILED))
    return and_(settled, c.completed_ms < now - _ms(p.quarantine_released_s))


def _sagas(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = saga.c
    finished = c.state.in_((SagaState.COMPLETED.value, SagaState.ABORTED.value))
    return and_(finished, c.updated_at_ms < now - _ms(p.sagas_finished_s))


def _pool_effects(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    return effects_table.c.ended_ms < now - _ms(p.pool_effects_s)


def _pool_members(now: int, p: RetentionConfig) -> ColumnElement[bool]:
    c = members_table.c
    # stale by the status command's rule (three beats missed) and older than the retention
    return and_(c.beat_ms + 3 * c.period_ms < now, c.beat_ms < now - _ms(p.pool_members_stale_s))


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
        name=StoreTable.INJECT_JOURNAL,
        table=journal.journal_table,
        condition=_journal,
        age=journal.journal_table.c.opened_ms,
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
    PurgeRule(
        name=StoreTable.SPAWN_REQUESTS,
        table=requests.spawn_requests_table,
        condition=_spawn_requests,
        age=requests.spawn_requests_table.c.sent_ms,
    ),
    # a run's steps and branches before the run row (see the module doc)
    PurgeRule(
        name=StoreTable.RUN_STEPS,
        table=run_step,
        condition=_run_steps,
        age=run_step.c.created_at,
        age_scale=1000.0,
    ),
    PurgeRule(name=StoreTable.RUN_BRANCHES, table=run_branch, condition=_run_branches, age=None),
    PurgeRule(
        name=StoreTable.RUNS, table=run, condition=_runs, age=run.c.created_at, age_scale=1000.0
    ),
    PurgeRule(
        name=StoreTable.RELEASE_REQUESTS,
        table=release_table,
        condition=_releases,
        age=release_table.c.requested_ms,
    ),
    PurgeRule(name=StoreTable.SAGAS, table=saga, condition=_sagas, age=saga.c.created_at_ms),
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


def rules_for(*tables: StoreTable) -> tuple[PurgeRule, ...]:
    """The rules of ``tables`` in :data:`RULES` order (a process purges only the tables it
    writes: a relay beside a gateway must not apply its own retention to the gateway's rows)."""
    wanted = set(tables)
    return tuple(r for r in RULES if r.name in wanted)


# What each process other than the gateway purges (the gateway purges every rule): the tables it
# writes itself. A process sharing a gateway's store thus never applies its own retention to
# the gateway's rows.
RELAY_TABLES = (StoreTable.OUTBOX,)
POOL_MEMBER_TABLES = (
    StoreTable.DEDUPE,
    StoreTable.IDEMPOTENCY,
    StoreTable.POOL_EFFECTS,
    StoreTable.POOL_MEMBERS,
    StoreTable.RELEASE_REQUESTS,
)
REPORTER_TABLES = (StoreTable.FAILED_REPORTED,)
SAGA_TABLES = (StoreTable.SAGAS, StoreTable.OUTBOX, StoreTable.DEDUPE, StoreTable.IDEMPOTENCY)
