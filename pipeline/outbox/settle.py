"""Waiting for a relay batch's delivery reports, however long the broker is away.

The relay's producer never times a record out (docs/outbox.md, invariant 4), so this wait has
no end but the reports themselves or a stop. Past ``timeout_s`` the unconfirmed rows are
reported once -- a warning and ``publish_errors_total{reason="timeout"}`` -- and the backlog
gauges keep moving; the rows stay queued in order. A stop ends the wait after a short grace:
what is unconfirmed stays pending and is resent later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .batch import Batch
from .metrics import OutboxMetrics, PublishFailure

log = logging.getLogger("pipeline.outbox.relay")

STOP_GRACE_S = 2.0


def settle(
    batch: Batch,
    producer: Any,
    *,
    timeout_s: float,
    metrics: OutboxMetrics,
    observe_backlog: Callable[[], None],
    stop: threading.Event | None,
) -> None:
    """Serve ``producer``'s delivery reports until every row of ``batch`` has one (or a stop)."""
    started = time.monotonic()
    late: float | None = started + timeout_s
    grace: float | None = None
    while batch.done < len(batch.rows):
        producer.poll(0.05)
        now = time.monotonic()
        if late is not None and now > late:
            late = None
            waiting = len(batch.rows) - batch.done
            metrics.publish_error(PublishFailure.TIMEOUT, waiting)
            log.warning(
                "outbox relay: %d deliveries unconfirmed after %.0f s (is the broker "
                "reachable?); they stay queued in lsn order until it confirms them",
                waiting,
                now - started,
            )
        if late is None:
            observe_backlog()
        if stop is not None and stop.is_set():
            grace = grace or now + STOP_GRACE_S
            if now > grace:
                break  # stopping: unconfirmed rows stay pending and are resent later
