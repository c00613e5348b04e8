"""Retention rules of a run: three tables, purged children first.

A run's steps and branches go first, each while their run is finished, and the run row last,
once none of its steps or branches is left (a pass bounded by ``max_batches`` may stop in
between; the next one finishes). A run with an unsent outbox row on any of its branches is never
finished. ``outbox_branch`` and ``outbox_sent`` are never purged: small rows per branch holding
the lsn counter a downstream fold relies on, and the branch's ack watermark (docs/store.md).
"""

from __future__ import annotations

from sqlalchemy import Column, ColumnElement, and_, exists, func, select

from pipeline.outbox.tables import RowStatus, outbox, outbox_branch, outbox_sent
from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import PurgeRule, StoreTable

from .tables import run, run_branch, run_step


def _run_finished(
    now: int, p: RetentionConfig, tenant: Column[str], run_id: Column[str]
) -> ColumnElement[bool]:
    """The run ``(tenant, run_id)`` completed ``runs_completed_s`` ago and has no unsent outbox
    row on any of its branches (a FAILED row stops its branch until an operator acts)."""
    r, b, o, w, s = run.c, run_branch.c, outbox.c, outbox_branch.c, outbox_sent.c
    # unsent: above the branch's ack watermark (pending), or FAILED (abandoned or not)
    mark = select(s.sent_lsn).where(s.tenant == w.tenant, s.branch_key == w.branch_key)
    pending = exists().where(
        b.tenant == r.tenant,
        b.run_id == r.run_id,
        w.tenant == b.tenant,
        w.branch_key == b.branch_key,
        w.last_lsn > func.coalesce(mark.scalar_subquery(), 0),
        ~w.abandoned,
    )
    failed = exists().where(
        b.tenant == r.tenant,
        b.run_id == r.run_id,
        o.tenant == b.tenant,
        o.branch_key == b.branch_key,
        o.status == int(RowStatus.FAILED),
    )
    unsent = pending | failed
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


RULES: tuple[PurgeRule, ...] = (
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
)
