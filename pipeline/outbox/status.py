"""Read-only views of the outbox: backlog, oldest unsent age, per-branch positions.

Used by ``fleet outbox status`` and by the relay's metrics. Only unsent rows count as backlog
(above their branch's ack watermark, not FAILED): dropped rows (abandoned branches) will never
ship, sent rows already did.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, and_, func, select, text

from pipeline.store import readonly

from .tables import RowStatus, outbox, outbox_branch, outbox_sent, unsent


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


_FAILED = int(RowStatus.FAILED)
# The branches that may have unsent rows, as the index ``ix_outbox_branch_unsent`` is written (so
# both databases use it): every read below starts there, as many entries as active branches,
# each joined to its watermark row ``s``.
_ACTIVE = unsent("b")
_WATERMARK = "JOIN outbox_sent s ON s.tenant = b.tenant AND s.branch_key = b.branch_key"


def _sql(select_list: str, tail: str, tenant: str | None) -> Any:
    where = _ACTIVE if tenant is None else f"{_ACTIVE} AND b.tenant = :tenant"
    return text(f"SELECT {select_list} FROM outbox_branch b {_WATERMARK} {tail} WHERE {where}")


def backlog(engine: Engine, *, tenant: str | None = None) -> tuple[int, float | None]:
    """``(unsent rows, created_at of the oldest unsent row or None)``, read off the watermarks.

    Lsns are gapless and rows above a branch's watermark are never purged, so a live branch has
    ``last_lsn - sent_lsn`` unsent rows, less its FAILED one when stopped (FAILED is terminal,
    not backlog). The oldest is the row just above each watermark: one point read per active
    branch on the unique index, however many sent rows the table holds (a stopped branch's
    oldest is its FAILED row's time, the moment it stopped shipping).
    """
    params = {} if tenant is None else {"tenant": tenant}
    with readonly(engine).connect() as conn:  # a pure read: BEGIN DEFERRED on SQLite
        above = conn.execute(
            _sql("coalesce(sum(b.last_lsn - s.sent_lsn), 0)", "", tenant), params
        ).scalar_one()
        count = int(above or 0)
        oldest = None
        if count:
            failed = conn.execute(
                _sql(
                    "count(*)",
                    "JOIN outbox o ON o.tenant = b.tenant AND o.branch_key = b.branch_key "
                    f"AND o.lsn > s.sent_lsn AND o.status = {_FAILED}",
                    tenant,
                ),
                params,
            ).scalar_one()
            count -= int(failed or 0)
            oldest = conn.execute(
                _sql(
                    "min(o.created_at)",
                    "JOIN outbox o ON o.tenant = b.tenant AND o.branch_key = b.branch_key "
                    "AND o.lsn = s.sent_lsn + 1",
                    tenant,
                ),
                params,
            ).scalar()
    return max(0, count), (float(oldest) if oldest is not None and count else None)


def outbox_status(
    engine: Engine, *, tenant: str | None = None, now: float | None = None
) -> OutboxStatus:
    count, oldest = backlog(engine, tenant=tenant)
    now = time.time() if now is None else now
    b, w = outbox_branch.c, outbox_sent.c
    failed = (
        select(outbox.c.tenant, outbox.c.branch_key, func.count().label("n"))
        .where(outbox.c.status == _FAILED)
        .group_by(outbox.c.tenant, outbox.c.branch_key)
    )
    branches_stmt = (
        select(b.tenant, b.branch_key, b.last_lsn, func.coalesce(w.sent_lsn, 0), b.abandoned)
        .select_from(
            outbox_branch.outerjoin(
                outbox_sent, and_(w.tenant == b.tenant, w.branch_key == b.branch_key)
            )
        )
        .order_by(b.tenant, b.branch_key)
    )
    if tenant is not None:
        failed = failed.where(outbox.c.tenant == tenant)
        branches_stmt = branches_stmt.where(b.tenant == tenant)
    with readonly(engine).connect() as conn:  # a pure read: BEGIN DEFERRED on SQLite
        stopped = {(t, k): int(n) for t, k, n in conn.execute(failed)}
        branches = [
            BranchStatus(
                tenant=t,
                branch_key=k,
                next_lsn=int(last) + 1,
                pending=(
                    0 if abandoned else max(0, int(last) - int(sent) - stopped.get((t, k), 0))
                ),
                abandoned=bool(abandoned),
            )
            for t, k, last, sent, abandoned in conn.execute(branches_stmt)
        ]
    return OutboxStatus(
        backlog=count,
        oldest_unsent_age_s=None if oldest is None else max(0.0, now - oldest),
        branches=branches,
    )
