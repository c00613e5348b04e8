"""The run's pool members (``python -m pipeline pool run``), each a restartable child process.

``member_argv`` is the one place the lab states what it needs from ``fleet pool run``
(worker pools): consumer group ``fleet.pool.<NAME>`` on topic ``fleet.pool.<NAME>``,
the assignment strategy, static membership, ``max.poll.records``/``max.poll.interval.ms``,
concurrency, dedupe, the built-in sleep step (the record's ``step_s``, scaled) and the events
log the lab counts steps and redeliveries from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.support.processes import FleetProcess

from .scenario import Scenario, StopSignal

POISON_HANDLER = "pipeline.lab.step:run_step"  # only for scenarios with [poison]


def member_argv(
    s: Scenario, *, pool: str, bootstrap: str, member: str, store_url: str, events: Path
) -> list[str]:
    m = s.members
    step = ["--handler", POISON_HANDLER] if s.poison is not None else ["--sleep", "0"]
    argv = [
        "pool",
        "run",
        "--pool",
        pool,
        "--bootstrap",
        bootstrap,
        *step,
        "--time-scale",
        repr(s.time_scale),  # the record's step_s, scaled
        "--member",
        member,
        "--events",
        str(events),
        "--assignment",
        m.assignment.value,
        "--concurrency",
        m.concurrency.value,
        "--max-in-flight",
        str(m.max_in_flight),
        "--max-poll-records",
        str(m.max_poll_records),
        # scenario milliseconds scaled to the machine; librdkafka wants >= session timeout
        "--max-poll-interval-ms",
        str(max(m.session_timeout_ms, int(s.wall(m.max_poll_interval_ms)))),
        "--session-timeout-ms",
        str(m.session_timeout_ms),
        "--store-url",
        store_url,
        "--dedupe" if m.dedupe else "--no-dedupe",
    ]
    if s.poison is not None:  # the scenario's backoffs, not the runtime's default
        argv += ["--retry", s.poison.retry_option(s.time_scale)]
    if m.static_membership:
        argv += ["--instance-id", member]
    return argv


@dataclass
class Members:
    """The pool members of one run, by lab id (``m00`` ...), each restartable."""

    scenario: Scenario
    pool: str
    bootstrap: str
    out: Path
    store_url: str
    procs: dict[str, FleetProcess] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # e.g. FLEET_KAFKA_CONFIG, the login
    joins: dict[str, float] = field(default_factory=dict)  # wall time a started member joins

    def start(self, member: str, *, join_at: float | None = None) -> None:
        """Spawn ``member``; with ``join_at`` (epoch seconds) it starts up now and joins the
        group then (``fleet pool run --start-at``), and counts as up only from then."""
        env = {**self.env, "FLEET_LAB_TIME_SCALE": repr(self.scenario.time_scale)}
        argv = member_argv(
            self.scenario,
            pool=self.pool,
            bootstrap=self.bootstrap,
            member=member,
            store_url=self.store_url,
            events=self.out / f"events-{member}.jsonl",
        )
        if join_at is not None:
            argv += ["--start-at", repr(join_at)]
        self.joins[member] = join_at if join_at is not None else 0.0
        log = self.out / f"member-{member}.log"
        self.procs[member] = FleetProcess(log, argv, env=env, name=member).start()

    def stop(self, member: str, how: StopSignal, *, wait_s: float = 30.0) -> None:
        """SIGKILL or SIGTERM; a graceful stop that hangs for ``wait_s`` is killed (and the
        hang is in the member's log)."""
        proc = self.procs.pop(member, None)
        if proc is None:
            return
        if how is StopSignal.KILL:
            proc.kill9(wait_s)
        else:
            proc.stop(wait_s)

    def up(self, now: float | None = None) -> int:
        """Members alive and past their join time (a replacement waiting to join is down)."""
        now = time.time() if now is None else now
        return sum(1 for m, p in self.procs.items() if p.alive and self.joins.get(m, 0.0) <= now)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.alive and p.pid is not None]

    def died(self) -> list[str]:
        return [m for m, p in self.procs.items() if not p.alive]

    def stop_all(self) -> None:
        for member in list(self.procs):
            self.stop(member, StopSignal.TERM)
