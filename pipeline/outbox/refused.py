"""A relay's rows the broker refused for good: each made ``FAILED``, its branch stopped behind it.

The relay calls :func:`fail_refused` on its store thread after the batch's acks, so each refused
row heads its branch when it is marked (:func:`.terminal.fail_row` checks that it does; a row
that does not is left pending and tried again after the earlier rows). docs/outbox.md,
"Permanent produce errors".
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError

from .metrics import OutboxMetrics
from .terminal import FailedRow, TerminalSink, fail_row

log = logging.getLogger("pipeline.outbox.relay")  # the relay's own log, as before the split


def fail_refused(
    engine: Engine,
    rows: list[FailedRow],
    sink: TerminalSink | None,
    stopped: set[tuple[str, str]],
    metrics: OutboxMetrics,
) -> None:
    """Mark each of ``rows`` ``FAILED``; ``stopped`` gains the branches stopped behind them."""
    for row in rows:
        branch = (row.tenant, row.branch_key)
        try:
            done = fail_row(engine, row, sink)
        except SQLAlchemyError as exc:
            stopped.discard(branch)  # still pending: tried again
            raise StoreError(f"outbox relay: cannot mark row {row.id} failed: {exc}") from exc
        if not done:
            stopped.discard(branch)  # an earlier row goes first
            continue
        stopped.add(branch)
        metrics.rows_failed_total.labels(reason=row.reason).inc()
        log.error(
            "outbox relay: row %d (branch %s/%s lsn %d, topic %s) refused for good: %s "
            "(%s); the row is FAILED and its branch is stopped behind it",
            row.id,
            row.tenant,
            row.branch_key,
            row.lsn,
            row.topic,
            row.reason,
            row.error,
        )
