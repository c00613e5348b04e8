"""The relay's ack as SQL: raise a branch's watermark, and mark the branch idle when it is all sent.

R-OUT-4: the watermark ``outbox_sent.sent_lsn`` moves from ``lo - 1`` to ``hi`` over a confirmed
run ``[lo, hi]``: only from ``lo - 1`` (never past an unconfirmed row), only upwards (a late or
repeated ack is a no-op), never on an abandoned branch. The watermark row is not the branch's lsn
counter (``outbox_branch``), which a writer holds locked until its commit: the ack never waits for
a writer.

When the run ends at the branch's last lsn, the same ack raises ``outbox_branch.idle_lsn`` to it
and clears ``active``, which takes the branch out of the index of branches that may have unsent
rows (``ix_outbox_branch_unsent``; the next writer of the branch sets ``active`` again). On PostgreSQL only if no writer holds that row (``SKIP LOCKED``):
such a writer adds a row, whose ack marks the branch idle later; one that rolls back leaves the
branch listed with nothing unsent, which costs the relay's listing one entry until the branch's
next ack. ``idle_lsn`` is only ever at or below the watermark, so a branch with unsent rows is
always listed.

Every statement takes named parameters: ``tenant``, ``branch``, ``prev`` (``lo - 1``) and ``hi``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_NAMED = {"qmark": ":{}", "named": ":{}", "format": "%({})s", "pyformat": "%({})s"}

_RAISE = (
    "UPDATE outbox_sent SET sent_lsn = {hi} WHERE tenant = {tenant} AND branch_key = {branch} "
    "AND sent_lsn >= {prev} AND sent_lsn < {hi} AND NOT abandoned"
)
# PostgreSQL: one statement. A plain UPDATE of outbox_branch would wait for a writer's lock (and
# find last_lsn moved past hi once it got it); FOR NO KEY UPDATE SKIP LOCKED passes it by.
_PG = (
    f"WITH s AS ({_RAISE} RETURNING tenant, branch_key), "
    "idle AS (SELECT b.tenant, b.branch_key FROM outbox_branch b JOIN s "
    "ON b.tenant = s.tenant AND b.branch_key = s.branch_key WHERE b.last_lsn = {hi} "
    "FOR NO KEY UPDATE OF b SKIP LOCKED) "
    "UPDATE outbox_branch SET idle_lsn = {hi}, active = false FROM idle "
    "WHERE outbox_branch.tenant = idle.tenant AND outbox_branch.branch_key = idle.branch_key"
)
# SQLite: one writer at a time, so two statements in the ack's transaction; the second only when
# the watermark is now hi (the first moved it, or an earlier ack had).
_IDLE = (
    "UPDATE outbox_branch SET idle_lsn = {hi}, active = 0 "
    "WHERE tenant = {tenant} AND branch_key = {branch} "
    "AND last_lsn = {hi} AND idle_lsn < {hi} AND {hi} = (SELECT s.sent_lsn FROM outbox_sent s "
    "WHERE s.tenant = {tenant} AND s.branch_key = {branch})"
)


def ack_statements(dialect: str, paramstyle: str) -> tuple[str, ...]:
    """The statements of one branch's ack, in order, for ``dialect`` and ``paramstyle``."""
    style = _NAMED.get(paramstyle)
    if style is None:
        raise ValueError(f"outbox relay: unsupported DB-API paramstyle {paramstyle!r}")
    names = {n: style.format(n) for n in ("tenant", "branch", "prev", "hi")}
    texts = (_PG,) if dialect == "postgresql" else (_RAISE, _IDLE)
    return tuple(text.format(**names) for text in texts)


def ack_params(branch_runs: Iterable[tuple[tuple[str, str], tuple[int, int]]]) -> list[Any]:
    """One parameter mapping per branch from ``((tenant, branch), (lo, hi))`` pairs."""
    return [
        {"tenant": t, "branch": b, "prev": lo - 1, "hi": hi} for (t, b), (lo, hi) in branch_runs
    ]
