"""Read-only views of the outbox: backlog, oldest unsent age, per-branch positions.

Used by ``fleet outbox status`` and by the relay's metrics. Only ``PENDING`` rows count as backlog:
dropped rows (abandoned branches) will never ship, sent rows already did.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select, text

from pipeline.store import readonly

from .tables import RowStatus, outbox, outbox_branch


@dataclass(frozen=True, kw_only=True)
class BranchStatus:
    tenant: str
    branch_key: str
    next_lsn: int
    pending: int
    abandoned: bool


@dataclass(frozen=True, kw_only=True)
class OutboxStatus:
    backlog: int
    oldest_unsent_age_s: float | None
    branches: list[BranchStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ``status = 0`` as a literal: SQLite and PostgreSQL match only a literal to the partial index
# ``ix_outbox_pending`` (a bound parameter would scan the whole table)
_PENDING = text(f"outbox.status = {int(RowStatus.PENDING)}")


def backlog(engine: Engine, *, tenant: str | None = None) -> tuple[int, float | None]:
    """``(pending rows, created_at of the oldest pending row or None)``.

    Both reads stay on the partial index of pending rows (the relay refreshes them while it
    drains): the count reads only the index, and the oldest row is the lowest pending id -- ids
    are handed out as rows are written, so that is the oldest row up to the clocks of writers
    racing within the same moment. One row read, not every pending row's ``created_at``.
    """
    count_stmt = select(func.count()).select_from(outbox).where(_PENDING)
    oldest_stmt = select(outbox.c.created_at).where(_PENDING).order_by(outbox.c.id).limit(1)
    if tenant is not None:
        count_stmt = count_stmt.where(outbox.c.tenant == tenant)
        oldest_stmt = oldest_stmt.where(outbox.c.tenant == tenant)
    with readonly(engine).connect() as conn:  # a pure read: BEGIN DEFERRED on SQLite
        count = int(conn.execute(count_stmt).scalar_one())
        oldest = conn.execute(oldest_stmt).scalar() if count else None
    return count, (float(oldest) if oldest is not None else None)


def outbox_status(
    engine: Engine, *, tenant: str | None = None, now: float | None = None
) -> OutboxStatus:
    count, oldest = backlog(engine, tenant=tenant)
    now = time.time() if now is None else now
    pending = (
        select(outbox.c.tenant, outbox.c.branch_key, func.count().label("n"))
        .where(outbox.c.status == int(RowStatus.PENDING))
        .group_by(outbox.c.tenant, outbox.c.branch_key)
    )
    branches_stmt = select(
        outbox_branch.c.tenant,
        outbox_branch.c.branch_key,
        outbox_branch.c.last_lsn,
        outbox_branch.c.abandoned,
    ).order_by(outbox_branch.c.tenant, outbox_branch.c.branch_key)
    if tenant is not None:
        pending = pending.where(outbox.c.tenant == tenant)
        branches_stmt = branches_stmt.where(outbox_branch.c.tenant == tenant)
    with readonly(engine).connect() as conn:  # a pure read: BEGIN DEFERRED on SQLite
        per_branch = {(t, b): int(n) for t, b, n in conn.execute(pending)}
        branches = [
            BranchStatus(
                tenant=t,
                branch_key=b,
                next_lsn=int(last) + 1,
                pending=per_branch.get((t, b), 0),
                abandoned=bool(abandoned),
            )
            for t, b, last, abandoned in conn.execute(branches_stmt)
        ]
    return OutboxStatus(
        backlog=count,
        oldest_unsent_age_s=None if oldest is None else max(0.0, now - oldest),
        branches=branches,
    )
