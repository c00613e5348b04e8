"""The nemesis: faults on a seeded schedule, each written to the history with its recovery.

A scenario is a closed value (:class:`Scenario`): its catalogue number, the requirement it
checks, whether it needs a broker of its own (it kills the broker), and the fault it plays
again and again while the workload runs. The schedule - when each fault starts, how long it
lasts - comes from ``random.Random(seed)``, so a run is repeatable up to the machine's timing.

Every fault writes ``fault`` then ``heal``; then the nemesis waits (bounded) until the fleet
makes progress again - one more message with an outcome - and writes ``recovered`` with the
seconds from heal to that progress. A gateway that exited on its own (fenced, fatal) is
restarted by the heal, as a supervisor would, and the ``heal`` row says so.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LocalCluster

from .checker import Verdict
from .history import HistoryWriter, Op
from .workload import Workload, WorkloadConfig

RECOVERY_BOUND_S = 90.0
SESSION_TIMEOUT_S = 10.0  # pipeline.kafka.settings: the gateway consumer's session.timeout.ms
MESSAGE_TIMEOUT_S = 30.0  # pipeline.kafka.settings: the producer's message.timeout.ms


class Fault(StrEnum):
    KILL9 = "kill9"
    SIGSTOP = "sigstop"
    BROKER_DOWN = "broker_down"
    CLEAN_RESTART = "clean_restart"
    # broker-side and environment faults: pipeline/chaos/cluster_faults.py
    LEADER_KILL9 = "leader_kill9"
    LEADER_PAUSE = "leader_pause"
    ROLLING_RESTART = "rolling_restart"
    CUT_OFF = "cut_off"
    LOGDIR_UNWRITABLE = "logdir_unwritable"
    STORE_FULL = "store_full"
    CLOCK_SKEW = "clock_skew"
    RETENTION = "retention"
    # gateway crash windows and a twin host id: pipeline/chaos/crash_faults.py
    CRASH_AFTER_COMMIT = "crash_after_commit"
    TWIN = "twin"
    CRASH_BEFORE_MARK_SENT = "crash_before_mark_sent"
    # worker-pool faults: pipeline/chaos/pool_faults.py
    STATIC_KILL9 = "static_kill9"
    STORM = "storm"
    POISON_STORM = "poison_storm"


@dataclass(frozen=True, kw_only=True)
class NemesisContext:
    workload: Workload
    history: HistoryWriter
    rng: random.Random
    cluster: LocalCluster | None = None
    rig: Any = None  # what the scenario's rig set up for this repetition (a proxy, a mount)


Action = Callable[[NemesisContext, float], tuple[str, dict[str, Any]]]
# A scenario's apparatus for one repetition: entered after the workload wrote its configs and
# before the gateways start (it may rewrite a config), left after the repetition.
Rig = Callable[[Workload, LocalCluster | None], AbstractContextManager[Any]]


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    number: int  # its number in the docs/chaos.md catalogue
    fault: Fault
    checks: str  # the requirement it checks, for the table and docs/chaos.md
    own_broker: bool = False
    first_s: tuple[float, float] = (2.0, 4.0)  # first fault, seconds after the stream starts
    gap_s: tuple[float, float] = (1.0, 4.0)  # between a recovery and the next fault
    hold_s: tuple[float, float] = (0.0, 1.5)  # how long the fault lasts before its heal
    strict: bool = False  # an orderly fault: any FAILED, dead letter or rejection is a finding
    action: Action | None = None  # None: the built-in action for ``fault``
    nodes: int = 1  # the own broker's KRaft nodes (1 or 3)
    broker: Callable[[Path], LocalCluster] | None = None  # a special own broker (listeners)
    rig: Rig | None = None
    max_faults: int | None = None  # None: faults until the stream ends
    duration_s: float | None = None  # None: the run's --duration
    # the fleet under test and its rules: the two gateways and checker.check by default; a pool
    # scenario brings its own (pipeline/chaos/pool_faults.py)
    workload: Callable[[WorkloadConfig, HistoryWriter], Workload] = Workload
    checker: Callable[[Iterable[Mapping[str, Any]]], Verdict] | None = None


def _recover(ctx: NemesisContext, fault: str, healed_at: float) -> None:
    """Wait until one more message has an outcome; restart a gateway that died meanwhile."""
    w = ctx.workload
    base = w.outcomes()
    deadline = healed_at + RECOVERY_BOUND_S
    while time.monotonic() < deadline:
        for p in w.procs.values():
            if not p.alive:  # fenced or fatal after the fault: a supervisor restarts it
                ctx.history.write(Op.HEAL, name=fault, restarted=p.name, exit_code=p.exit_code)
                p.start()
        if w.outcomes() > base:
            ctx.history.write(
                Op.RECOVERED, name=fault, seconds=round(time.monotonic() - healed_at, 3)
            )
            return
        if not w.running() and w.outcomes() >= w.sent:
            ctx.history.write(Op.RECOVERED, name=fault, seconds=None, note="nothing pending")
            return
        time.sleep(0.2)
    ctx.history.write(Op.RECOVERED, name=fault, seconds=RECOVERY_BOUND_S, timed_out=True)


def _kill9(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    b = ctx.workload.procs["B"]
    b.kill9()
    time.sleep(down)
    b.start()
    return "B", {"down_s": round(down, 3)}


def _sigstop(ctx: NemesisContext, stopped: float) -> tuple[str, dict[str, Any]]:
    b = ctx.workload.procs["B"]
    b.pause()
    time.sleep(stopped)
    b.resume()
    return "B", {"stopped_s": round(stopped, 3)}


def _broker_down(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    cluster = ctx.cluster
    assert cluster is not None, "broker_down needs the scenario's own broker"
    for node in cluster.nodes:
        cluster.kill(node.spec.node_id)
    time.sleep(down)
    cluster.start_again()
    return "broker", {"down_s": round(down, 3)}


def _clean_restart(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    host = ctx.rng.choice(("A", "B"))
    p = ctx.workload.procs[host]
    code = p.stop()
    time.sleep(down)
    p.start()
    return host, {"exit_code": code, "down_s": round(down, 3)}


_ACTIONS: dict[Fault, Callable[[NemesisContext, float], tuple[str, dict[str, Any]]]] = {
    Fault.KILL9: _kill9,
    Fault.SIGSTOP: _sigstop,
    Fault.BROKER_DOWN: _broker_down,
    Fault.CLEAN_RESTART: _clean_restart,
}


def play(scenario: Scenario, ctx: NemesisContext) -> int:
    """Inject ``scenario``'s fault on its seeded schedule while the workload runs; returns the
    number of faults injected. The last fault may outlast the stream: its heal still runs."""
    w = ctx.workload
    time.sleep(ctx.rng.uniform(*scenario.first_s))
    faults = 0
    action = scenario.action or _ACTIONS[scenario.fault]
    while w.running() and (scenario.max_faults is None or faults < scenario.max_faults):
        ctx.history.write(Op.FAULT, name=str(scenario.fault))
        hold = ctx.rng.uniform(*scenario.hold_s)
        target, detail = action(ctx, hold)
        healed = time.monotonic()
        ctx.history.write(Op.HEAL, name=str(scenario.fault), target=target, **detail)
        faults += 1
        _recover(ctx, str(scenario.fault), healed)
        if not w.running():
            break
        time.sleep(ctx.rng.uniform(*scenario.gap_s))
    return faults


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="kill9-pull",
            number=1,
            fault=Fault.KILL9,
            checks="R-ACK-2 reply path and R-ACK-3 forward path; R-ACK-8 effectively once: "
            "kill -9 of host B (main-b pull, worker-b inject) at random "
            "points, restarted at once",
        ),
        Scenario(
            name="zombie",
            number=3,
            fault=Fault.SIGSTOP,
            checks="R-TOP-4 exclusive consumer: host B SIGSTOPped past session.timeout.ms, "
            "then SIGCONT; a fenced or expired member rejoins or is restarted, never injects twice",
            hold_s=(SESSION_TIMEOUT_S + 1.5, SESSION_TIMEOUT_S + 5.0),
            gap_s=(2.0, 4.0),
        ),
        Scenario(
            name="broker-down",
            number=8,
            fault=Fault.BROKER_DOWN,
            checks="R-OUT-1 sends queue in the outbox while the broker is away; R-FAIL-4 "
            "the relay may publish twice: the scenario's own broker kill -9'd past message.timeout.ms, "
            "restarted with its data",
            own_broker=True,
            hold_s=(MESSAGE_TIMEOUT_S + 1.0, MESSAGE_TIMEOUT_S + 8.0),
            gap_s=(2.0, 4.0),
        ),
        Scenario(
            name="clean-restart",
            number=15,
            fault=Fault.CLEAN_RESTART,
            checks="R-ACK-2, R-ACK-3 under an orderly stop: SIGTERM to host A or B, restart; no "
            "duplicates at all and no FAILED",
            hold_s=(0.2, 2.0),
            strict=True,
        ),
    )
}
