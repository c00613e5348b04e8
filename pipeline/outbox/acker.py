"""Marking confirmed rows sent: the relay's only write -- one per branch, not one per row.

R-OUT-4: "ack only what the broker accepted". The ack raises the branch's watermark
``outbox_branch.sent_lsn`` from ``lo - 1`` to ``hi`` for the run ``[lo, hi]`` of rows the broker
confirmed. The prefix guard is inside the statement: the watermark moves only from ``lo - 1``
(never past an unconfirmed row: a run whose ``lo - 1`` is not yet sent is not acked at all),
only upwards (a late or repeated ack never lowers it), and never on an abandoned branch (a row a
rewind dropped while it was in flight stays ``DROPPED``; the drop was decided first).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError
from pipeline.store import pg_pipeline

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}

Branch = tuple[str, str]


def runs(rows: list[Any]) -> dict[Branch, tuple[int, int]]:
    """Per branch, ``(lo, hi)``: the first and last lsn of its rows in ``rows`` (lsn order)."""
    out: dict[Branch, tuple[int, int]] = {}
    for row in rows:
        branch = (row[1], row[2])
        first = out.get(branch)
        out[branch] = (row[3] if first is None else first[0], row[3])
    return out


class Acker:
    """Acks confirmed rows by moving their branches' watermarks."""

    def __init__(self, engine: Engine, *, tenant: str | None = None) -> None:
        self.engine = engine
        self.tenant = tenant
        p = _PLACEHOLDERS.get(engine.dialect.paramstyle, "?")
        self._sql = (
            f"UPDATE outbox_branch SET sent_lsn = {p} WHERE tenant = {p} AND branch_key = {p} "
            f"AND sent_lsn >= {p} AND sent_lsn < {p} AND NOT abandoned"
        )
        # PostgreSQL: a writer holds its branch's row lock from its lsn upsert to its commit and
        # may lock several branches in any order, so the ack never holds two branch locks (one
        # transaction per branch: it can wait, never deadlock; all branches in one round trip,
        # their commits not waiting for the WAL flush). SQLite: one writer at a time, so one
        # transaction per batch.
        self._one_per_statement = engine.dialect.name != "sqlite"

    def ack(self, rows: list[Any]) -> None:
        """Raise each branch's watermark over its run of ``rows`` (confirmed, lsn order)."""
        if not rows:
            return
        params = [(hi, t, b, lo - 1, hi) for (t, b), (lo, hi) in runs(rows).items()]
        try:
            if self._one_per_statement:
                auto = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                with auto as conn:  # a lost ack only re-sends (see each_without_flush)
                    pg_pipeline.each_without_flush(conn, self._sql, params)
            else:
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(self._sql, params)
        except SQLAlchemyError as exc:
            # Not acked: these rows go out again; the consumer's fold drops the copies.
            raise StoreError(f"outbox relay: cannot ack {len(rows)} rows: {exc}") from exc
