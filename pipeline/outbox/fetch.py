"""The relay's hot read: pending rows as DB-API SQL text, one statement per batch.

The relay reads every row it ships, so this read is on the hot path: it runs on the raw DB-API
cursor (plain tuples; no SQLAlchemy ``Row`` objects or per-column result processing, which cost
about four times the read itself). ``status = 0`` is written as a literal so both SQLite and
PostgreSQL match it to the partial index ``ix_outbox_pending`` (a bound parameter would not).
"""

from __future__ import annotations

from collections.abc import Iterable

from .tables import RowStatus

# The columns of a fetched row, in order (the relay indexes the tuples by position).
COLUMNS = ("id", "tenant", "branch_key", "lsn", "topic", "key", "value", "headers", "created_at")

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


class FetchSql:
    """Builds ``SELECT <COLUMNS> FROM outbox WHERE status = PENDING ... ORDER BY id LIMIT n``."""

    def __init__(self, paramstyle: str, *, tenant: str | None, limit: int) -> None:
        try:
            self._p = _PLACEHOLDERS[paramstyle]
        except KeyError:
            raise ValueError(
                f"outbox relay: unsupported DB-API paramstyle {paramstyle!r}"
            ) from None
        self._tenant = tenant
        self._limit = int(limit)
        self._head = (
            f"SELECT {', '.join(COLUMNS)} FROM outbox WHERE status = {int(RowStatus.PENDING)}"
        )

    def build(
        self, *, after: int | None, stopped: Iterable[tuple[str, str]] = ()
    ) -> tuple[str, tuple[object, ...]]:
        """``(sql, params)`` for the next batch: ids above ``after``, none of ``stopped``."""
        p = self._p
        parts = [self._head]
        params: list[object] = []
        if self._tenant is not None:
            parts.append(f"tenant = {p}")
            params.append(self._tenant)
        if after is not None:
            parts.append(f"id > {p}")
            params.append(after)
        for tenant, branch in stopped:  # rare and few: branches stopped by a FAILED row
            parts.append(f"NOT (tenant = {p} AND branch_key = {p})")
            params += [tenant, branch]
        return f"{' AND '.join(parts)} ORDER BY id LIMIT {self._limit}", tuple(params)
