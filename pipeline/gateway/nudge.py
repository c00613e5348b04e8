"""Hold and nudge: a pull entity with messages waiting and no open pull is told so.

R-HOLD-2: a main's gateway resolves an open send, else holds and nudges. A held message is
safe (at-least-once, in the store) but useless until the main drains it, and a main that is an
MCP client only drains when its agent calls ``poll``. So the gateway types a short line into the
main's *nudge target* (any injector: its tmux pane, a command, a callback) saying how much waits.

The rules, per entity:

* **never while a pull is open** -- an open pull will take the messages itself;
* **exponential backoff up to a cap** -- the first nudge goes out as soon as messages wait with
  no pull open, the next after ``initial_s``, then ``2 * initial_s``, ... capped at ``max_s``;
  a failed nudge counts as a nudge (the schedule is about not pestering, not about delivery);
* **reset on drain** -- once nothing waits, the next arrival starts the schedule afresh.

The schedule is a pure function of an injectable clock (:class:`NudgeSchedule`), so its unit test
needs no sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import FleetError
from pipeline.host.conversations import Conversations
from pipeline.host.held import HeldStore
from pipeline.support.clock import now_ms

from .injectors import Injector
from .metrics import GatewayMetrics
from .render import nudge_text

log = logging.getLogger(__name__)


@dataclass
class NudgeSchedule:
    """When the next nudge to one entity is due (monotonic seconds); pure, clock given."""

    initial_s: float
    max_s: float
    sent: int = 0
    next_at: float | None = None

    def due(self, now: float) -> bool:
        return self.next_at is None or now >= self.next_at

    def record(self, now: float) -> float:
        """A nudge went out at ``now``: returns the delay until the next one may."""
        delay = min(self.initial_s * (2.0**self.sent), self.max_s)
        self.sent += 1
        self.next_at = now + delay
        return delay

    def reset(self) -> None:
        self.sent = 0
        self.next_at = None


class Nudger:
    """Nudges each pull entity that has a nudge target, on the schedule above (one tick a call)."""

    def __init__(
        self,
        *,
        targets: Mapping[str, Injector],
        reads: sessionmaker[Session],
        conversations: Conversations,
        metrics: GatewayMetrics,
        gateway_id: str,
        initial_s: float,
        max_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.targets = dict(targets)
        self.reads = reads
        self.conversations = conversations
        self.metrics = metrics
        self.gateway_id = gateway_id
        self.clock = clock
        self.wall_ms = wall_ms
        self.schedules = {gid: NudgeSchedule(initial_s, max_s) for gid in self.targets}

    def run(self, stop: threading.Event) -> None:
        """The gateway loop: its own thread, so a slow nudge target delays no sweep."""
        every = min(next(iter(self.schedules.values())).initial_s, 0.5) if self.schedules else 0.5
        while not stop.wait(every):
            self.tick()

    def tick(self) -> int:
        """Check every target once; returns how many nudges were attempted."""
        now_ms = self.wall_ms()
        oldest_age = 0.0
        attempted = 0
        for gid, injector in self.targets.items():
            with self.reads() as s:
                pending, oldest = HeldStore.pending_stats(s, gid, now_ms)
                listening = pending > 0 and self.conversations.has_open_pull(s, gid, now_ms)
            schedule = self.schedules[gid]
            if pending == 0:
                schedule.reset()
                continue
            age_s = max(0.0, (now_ms - (oldest or now_ms)) / 1000)
            oldest_age = max(oldest_age, age_s)
            now = self.clock()
            if listening or not schedule.due(now):
                continue
            schedule.record(now)
            attempted += 1
            self._nudge(gid, injector, pending, age_s, schedule.sent)
        self.metrics.held_oldest_age.set(oldest_age)
        return attempted

    def _nudge(self, gid: str, injector: Injector, pending: int, age_s: float, n: int) -> None:
        try:
            injector.inject(
                gid=gid,
                msg_id=f"nudge-{gid}-{n}",
                kind="NUDGE",
                sender=self.gateway_id,
                body=nudge_text(gid, pending, age_s).encode(),
            )
        except FleetError as exc:
            self.metrics.nudges.labels("failed").inc()
            log.warning("nudge %d of %s failed: %s", n, gid, exc)
            return
        self.metrics.nudges.labels("sent").inc()
