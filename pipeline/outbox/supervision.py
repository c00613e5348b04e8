"""How the relay's ``run_forever`` reports a failed pass, and how it ends on a stop.

A failed pass is logged and waited out (the relay is its own supervisor: a broker outage never
reaches a writer). A stop ends the loop with one last pass, bounded: a gateway stops its relay
after its other loops (docs/gateway.md, "A clean stop"), so what they committed while stopping
-- the receipts of the last injects, a send the socket took -- goes out now, not at the next
start. A row the last pass cannot ship (the broker away, the budget spent) stays pending, as
always, and the next start sends it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pipeline.errors import FleetError

log = logging.getLogger(__name__)


def report_failure(exc: Exception, _attempt: int, delay: float) -> None:
    if isinstance(exc, FleetError):
        log.warning("outbox relay: %s; retrying in %.1fs", exc, delay)
    else:
        log.error("outbox relay: unexpected error; retrying in %.1fs", delay, exc_info=exc)


def last_pass(pump: Callable[[threading.Event], int], budget_s: float) -> int:
    """Run ``pump`` once with a stop that is set ``budget_s`` after it starts (no batch is
    started after that; the batches in flight get the settle's grace). Returns the rows shipped;
    a failure is logged, never raised (stopping: its rows stay pending)."""
    if budget_s <= 0:
        return 0
    stop = threading.Event()
    timer = threading.Timer(budget_s, stop.set)
    timer.daemon = True
    timer.start()
    try:
        return pump(stop)
    except Exception as exc:  # noqa: BLE001 - stopping: logged, the rows sent at the next start
        log.warning("outbox relay: the stop's last pass: %s; resent at the next start", exc)
        return 0
    finally:
        timer.cancel()
