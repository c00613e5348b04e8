"""What may be purged from each bounded table, and what never is: the rule types.

One :class:`PurgeRule` per table, declared by the package that owns the table (its
``purge_rules`` module) and assembled by the composition root (:mod:`pipeline.bootstrap.retention`): the condition a row must meet to be deleted, given ``now`` and
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

from sqlalchemy import Column, ColumnElement, Table

from .policy import RetentionConfig


class StoreTable(enum.StrEnum):
    """The bounded tables (metric label values: a closed set), in purge order."""

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


def ms(seconds: float) -> int:
    """A retention in seconds as a cutoff distance in milliseconds."""
    return int(seconds * 1000)


def in_purge_order(rules: tuple[PurgeRule, ...]) -> tuple[PurgeRule, ...]:
    """``rules`` in :class:`StoreTable` order (a run's steps and branches before the run row)."""
    order = list(StoreTable)
    return tuple(sorted(rules, key=lambda r: order.index(r.name)))


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
