"""The long-running relay's pass spacing: under steady load, passes at most one per spacing.

At a few hundred rows a second every relay pass ships the one to three rows committed while the
previous pass waited for its delivery reports, and a pass costs about the same whatever it
ships: a wake of the relay, a produce request (a wake of the client's broker thread for the
request, its linger and its response), the delivery report's wake, and on the consuming gateway
one fetch and one batch. So ``run_forever`` starts a pass no sooner than ``spacing_s`` after the
start of the last pass that shipped rows: under steady load a pass takes what a few commits
brought, in one produce request, and the consumer gets them in one batch. A relay that shipped
nothing for ``spacing_s`` (idle, or a first commit after a pause) starts at once, so an idle
send's latency does not change; under load a row waits at most ``spacing_s`` more than it did.

Nothing else changes: the rows wait in the store (committed) and in the hand-off queue, in
order; a stop ends the wait at once.
"""

from __future__ import annotations

import threading
import time


class Pacing:
    """When the next pass may start (one relay thread uses it)."""

    __slots__ = ("_last", "spacing_s")

    def __init__(self, spacing_s: float) -> None:
        self.spacing_s = max(0.0, spacing_s)
        self._last: float | None = None  # monotonic: the start of the last pass that shipped

    def hold(self, stop: threading.Event) -> float:
        """Wait (until ``stop``) for the spacing after the last pass that shipped; returns the
        start of the pass that follows (monotonic)."""
        now = time.monotonic()
        last = self._last
        if last is not None and now - last < self.spacing_s:
            stop.wait(last + self.spacing_s - now)
            now = time.monotonic()
        return now

    def shipped(self, started: float, rows: int) -> None:
        """The pass that started at ``started`` shipped ``rows``."""
        if rows:
            self._last = started
