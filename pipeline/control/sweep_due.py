"""The control plane's look-first for the maintenance sweep: is there a worker to watch at all?

Every maintenance tick the reaper asks, for each ``live`` worker, whether its process still
runs; drops mail held for reaped workers; and the stop handler finishes STOPs left
``stopping``. On a host that runs no spawned worker (most ticks of most gateways) all three find
nothing, yet each asked through the ORM on a session of the writer engine: on SQLite that is
``BEGIN IMMEDIATE``, the write lock, twice a tick, taken from the inbox and the relay for a read
that finds nothing. Here one DB-API statement on a read session (no write lock) answers the
three questions, and the sweep runs only the duties that have work.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.host import dbapi
from pipeline.host.held import held_table

from .spawns import LIVE, REAPED, STOPPING, spawns_table
from .stops import stops_table

_SWEEP_DUE = dbapi.Statement(
    f'SELECT EXISTS (SELECT 1 FROM "{spawns_table.name}" WHERE state = {{p}}), '
    f'EXISTS (SELECT 1 FROM "{stops_table.name}" WHERE state = {{p}}), '
    f'EXISTS (SELECT 1 FROM "{spawns_table.name}" s WHERE s.state = {{p}} AND EXISTS '
    f'(SELECT 1 FROM "{held_table.name}" h '
    "WHERE h.recipient = s.spawn_id AND h.drained_at_ms IS NULL))"
)


@dataclass(frozen=True, slots=True)
class SweepDue:
    """Which of the sweep's duties have rows to look at."""

    live: bool  # a ``live`` worker whose process the reaper checks
    stopping: bool  # a STOP still ``stopping`` (finished again once stalled)
    held_for_gone: bool  # undrained mail held for a reaped worker

    def any(self) -> bool:
        return self.live or self.stopping or self.held_for_gone


def sweep_due(session: Session | dbapi.HeldReader) -> SweepDue:
    """The three questions in one statement, on ``session`` (a read session or a held
    reader)."""
    row = dbapi.fetchone(session, _SWEEP_DUE, (LIVE, STOPPING, REAPED))
    return SweepDue(bool(row[0]), bool(row[1]), bool(row[2]))
