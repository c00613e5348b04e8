"""Taking a worker out of the fleet: STOP and reap (R-PRES-6, R-LIFE-1).

R-LIFE-1: "on stop or reap the worker's inbox goes away, so nothing is delivered to
the dead". A worker leaves the same way whether a STOP asked for it or its process died:

1. its ``fleet_spawns`` row becomes ``stopping`` (one conditional update: only a ``live`` row);
2. for a STOP, the profile's ``stop`` command runs (else its process group gets SIGTERM);
3. it is unregistered as a local entity and its presence is **tombstoned** (step 5's roster
   loses it within one heartbeat);
4. in one transaction: the row becomes ``reaped``, every message still held for it is
   dead-lettered ``RECIPIENT_GONE`` (the DLQ's FAILED reporter tells each sender once), and
   a STOP's answer is staged.

A crash after 1 leaves a ``stopping`` row: :meth:`Reaper.recover` finishes it at boot (the stop
command and the tombstone are idempotent). Mail arriving afterwards finds the row ``reaped`` and
is dead-lettered ``RECIPIENT_GONE`` by the inbox (``pipeline.gateway.inbound``).

Liveness, checked each maintenance tick (:meth:`Reaper.sweep`): the profile's ``check`` command
exits 0 while the worker lives; without one the worker **is** its launch process. A check that
cannot run or times out counts as alive (logged): only a definite answer reaps.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.host.entity_config import ProfileConfig
from pipeline.presence.model import Gone
from pipeline.support.clock import now_ms

from . import spawns
from .launcher import Launcher, fill
from .metrics import LifecycleMetrics
from .orphans import process_token

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 10.0


class ReapCause(enum.StrEnum):
    """Why a worker was reaped (the ``cause`` label of ``fleet_lifecycle_reaps_total``)."""

    STOP = "stop"  # a STOP asked for it
    DIED = "died"  # its process (or its check) says it is gone

    @property
    def gone(self) -> Gone:
        """What its presence departure says (``presence.Gone``)."""
        return Gone.STOPPED if self is ReapCause.STOP else Gone.DIED


Forget = Callable[[str, Gone], None]
"""Unregister ``gid`` as a local entity; publish its departure (why) and tombstone it."""
DropHeld = Callable[[Session, str], int]
"""Dead-letter every undrained message held for ``gid`` (``RECIPIENT_GONE``); returns how many."""
Answer = Callable[[Session], None]


def begin_stopping(session: Session, gid: str, cause: ReapCause) -> bool:
    """``live`` -> ``stopping`` (the cause kept in ``reason``); False when it was not live."""
    t = spawns.spawns_table
    result = session.execute(
        update(t)
        .where(t.c.spawn_id == gid, t.c.state == spawns.LIVE)
        .values(state=spawns.STOPPING, reason=cause.value)
    )
    return bool(getattr(result, "rowcount", 0))


class Reaper:
    """Stops and reaps this host's spawned workers (see the module doc for the steps)."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        profiles: Mapping[str, ProfileConfig],
        launcher: Launcher,
        values: Callable[[Any, ProfileConfig], Mapping[str, str]],
        forget: Forget,
        drop_held: DropHeld,
        metrics: LifecycleMetrics | None = None,
        check_timeout_s: float = CHECK_TIMEOUT_S,
    ) -> None:
        self.sessions = sessions
        self.profiles = dict(profiles)
        self.launcher = launcher
        self.values = values
        self.forget = forget
        self.drop_held = drop_held
        self.metrics = metrics
        self.check_timeout_s = check_timeout_s

    # -- the steps -----------------------------------------------------------------------------
    def end_process(self, row: Any) -> None:
        """Step 2: the profile's ``stop`` command, else SIGTERM to the worker's process group
        (the launcher started it as a session leader, so its pgid is its pid) -- unless its
        leader's pid now names another process (its recorded start token differs)."""
        profile = self.profiles.get(row.profile)
        if profile is not None and profile.stop:
            argv = fill(profile.stop, self.values(row, profile))
            try:
                subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=STOP_TIMEOUT_S, check=False)  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("stop %s: the stop command failed: %s", row.spawn_id, exc)
            return
        if not row.pid:
            return
        now = process_token(int(row.pid))
        if row.pid_start and now is not None and now != row.pid_start:
            log.warning("stop %s: pid %s is another process now: not signalled", row.spawn_id,
                        row.pid)  # fmt: skip
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
            os.killpg(int(row.pid), signal.SIGTERM)

    def finish(self, gid: str, cause: ReapCause, answer: Answer | None = None) -> bool:
        """Steps 3 and 4 for a ``stopping`` row; False when the row was not ``stopping``."""
        self.forget(gid, cause.gone)
        with self.sessions.begin() as s:
            row = spawns.get(s, gid)
            if row is None or row.state != spawns.STOPPING:
                return False
            spawns.set_state(s, gid, spawns.REAPED, reason=cause.value, ended_ms=now_ms())
            dropped = self.drop_held(s, gid)
            if answer is not None:
                answer(s)
        log.info("worker %s reaped (%s); %d held message(s) dead-lettered", gid, cause, dropped)
        if self.metrics is not None:
            self.metrics.reaps.labels(cause.value).inc()
            self.metrics.recipient_gone.labels("held").inc(dropped)
        return True

    # -- duties ----------------------------------------------------------------------------------
    def alive(self, row: Any) -> bool:
        """The liveness decision for one ``live`` row (module doc)."""
        profile = self.profiles.get(row.profile)
        if profile is not None and profile.check:
            argv = fill(profile.check, self.values(row, profile))
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, timeout=self.check_timeout_s,
                                      check=False)  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("check of %s gave no answer (%s): counted alive", row.spawn_id, exc)
                return True
            return done.returncode == 0
        return self.launcher.running(row.spawn_id, row.pid)

    def sweep(self) -> int:
        """Reap every live worker whose process died; dead-letter mail held for reaped gids."""
        with self.sessions() as s:
            rows = spawns.live(s)
        reaped = 0
        for row in rows:
            if self.alive(row):
                continue
            with self.sessions.begin() as s:
                started = begin_stopping(s, row.spawn_id, ReapCause.DIED)
            if started and self.finish(row.spawn_id, ReapCause.DIED):
                log.warning("worker %s (%s) died: reaped", row.spawn_id, row.profile)
                reaped += 1
        self._drop_late_held()
        return reaped

    def _drop_late_held(self) -> None:
        """Mail held for a reaped gid after its reap (a race with the inbox) goes too."""
        with self.sessions.begin() as s:
            dropped = sum(self.drop_held(s, row.spawn_id) for row in spawns.held_for_gone(s))
        if dropped and self.metrics is not None:
            self.metrics.recipient_gone.labels("held").inc(dropped)

    def recover(self) -> list[Any]:
        """At boot: rows a crash left ``stopping`` by a death are finished (a STOP's are
        finished by the stop handler, which owns its answer). Returns the STOP-less ones."""
        with self.sessions() as s:
            rows = spawns.in_state(s, spawns.STOPPING)
        for row in rows:
            if row.reason == ReapCause.DIED.value:
                self.finish(row.spawn_id, ReapCause.DIED)
        return [r for r in rows if r.reason != ReapCause.DIED.value]
