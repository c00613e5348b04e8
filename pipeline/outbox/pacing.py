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

The relay sleeps the spacing out *before* it waits for a commit's wake, not after: under load the
commits of those few milliseconds find it asleep on a timer, so their wakes only set its event
(no thread woken, no futex call on the committing thread), and the wait that follows returns at
once. Woken first and held after, the relay thread woke twice per pass, and each commit's wake
was a context switch on a two-core machine.
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

    def hold(self, stop: threading.Event, until: float | None = None) -> float:
        """Wait (until ``stop``, and never past ``until``, monotonic) for the spacing after the
        last pass that shipped; returns the start of the pass that follows (monotonic)."""
        now = time.monotonic()
        last = self._last
        if last is not None and now - last < self.spacing_s:
            end = last + self.spacing_s if until is None else min(last + self.spacing_s, until)
            if end > now:
                stop.wait(end - now)
                now = time.monotonic()
        return now

    def shipped(self, started: float, rows: int) -> None:
        """The pass that started at ``started`` shipped ``rows``."""
        if rows:
            self._last = started
