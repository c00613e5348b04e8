"""Worker-pool scenarios (catalogue numbers 5, 6, 17 in
``docs/chaos.md``) and the pool's planted bug.

The fleet under test is :class:`~.pool_workload.PoolWorkload` (members as ``fleet pool run``
processes), judged by :func:`~.pool_checker.check`. Faults:

* :func:`static_kill9` (#5): kill -9 of one static member (``--instance-id``), restarted at once,
  well inside its session timeout: the coordinator must hand the same instance its partitions
  back without a rebalance.
* :func:`storm` (#6, and #17 around a poison record): a member leaves - SIGTERM or kill -9, drawn
  by the schedule's seed - and rejoins after the hold; or an extra member joins and, after the
  hold, leaves the same way. Each is a rebalance (a kill -9'd member's partitions move after its session).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from .checker import Verdict
from .history import HistoryWriter, read_history
from .nemesis import Fault, NemesisContext, Scenario
from .planted import run_supervised
from .pool_checker import PoolRules, check
from .pool_workload import MemberProc, PoolSpec, PoolWorkload
from .workload import Workload, WorkloadConfig

STATIC = PoolSpec(static=True, session_timeout_ms=30_000)
STORM = PoolSpec(concurrency="key", step_s=0.2)
POISON = PoolSpec(poison_at_s=3.0, retry="0.5:2:5:0")  # waits 0.5, 1, 2, 4 s: 7.5 s of retries
POISON_RULES = PoolRules(poison=True, min_attempts=5, max_attempts=6, min_backoff_s=0.3)


def _pool(spec: PoolSpec) -> Any:
    def make(config: WorkloadConfig, history: HistoryWriter) -> Workload:
        return PoolWorkload(config, history, spec)

    return make


def _members(ctx: NemesisContext) -> list[MemberProc]:
    return [p for p in ctx.workload.procs.values() if isinstance(p, MemberProc)]


JOIN_BOUND_S = 45.0  # a member process takes 5-18 s to start here (2 loaded cores)


def _back(ctx: NemesisContext, p: MemberProc, t0: float) -> float | None:
    """Wait (bounded) until incarnation ``p.member`` ran a step - it is in the group with
    partitions - so the next fault does not hit a process still starting; seconds since
    ``t0``, or None (nothing was left to step on, or the bound)."""
    w = ctx.workload
    assert isinstance(w, PoolWorkload)
    while not w.stepped(p.member) and time.monotonic() - t0 < JOIN_BOUND_S:
        if not w.running() and w.outcomes() >= w.sent:  # nothing left for it to step on
            break
        time.sleep(0.2)
    return round(time.monotonic() - t0, 3) if w.stepped(p.member) else None


def static_kill9(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    """#5: kill -9 one static member, restart it ``down`` seconds later, and wait until the new
    incarnation runs a step (its partitions are back): the next fault must not kill an
    incarnation still starting, or the instance's session would run out and the rebalance
    would be the harness's doing. ``inside_session`` says whether it was back in time."""
    p = ctx.rng.choice(_members(ctx))
    t0 = time.monotonic()
    p.kill9()
    threading.Event().wait(down)
    p.start()
    back = _back(ctx, p, t0)
    inside = back is not None and back * 1000 < STATIC.session_timeout_ms
    return p.name, {"down_s": round(down, 3), "member": p.member, "back_s": back,
                    "inside_session": inside}  # fmt: skip


def _leave(ctx: NemesisContext, p: MemberProc) -> dict[str, Any]:
    how = ctx.rng.choice(("sigterm", "kill9"))
    if how == "kill9":
        p.kill9()
        return {"left": p.member, "how": how}
    return {"left": p.member, "how": how, "exit_code": p.stop()}


def storm(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """#6: a member in the group (it ran a step) leaves - SIGTERM or kill -9, seeded - and, if
    it is one of the pool's own, starts again ``hold`` later; or an extra member joins (at most
    two extras at a time). Nothing waits for a (re)joiner, so while one process starts (5-18 s
    here) the next faults hit the others: the group rebalances again and again."""
    w = ctx.workload
    assert isinstance(w, PoolWorkload)
    live = [p for p in [*_members(ctx), *w.extras] if p.alive and w.stepped(p.member)]
    extras = sum(x.alive for x in w.extras)
    if live and (extras >= 2 or ctx.rng.random() < 0.6):
        p = ctx.rng.choice(live)
        detail = _leave(ctx, p)
        threading.Event().wait(hold)
        if p in _members(ctx):
            p.start()
            detail["rejoining"] = p.member
        return p.name, {**detail, "hold_s": round(hold, 3), "in_group": len(live)}
    x = w.add_member()
    threading.Event().wait(hold)
    return x.name, {"joining": x.member, "hold_s": round(hold, 3), "in_group": len(live)}


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="static-restart",
            number=5,
            fault=Fault.STATIC_KILL9,
            action=static_kill9,
            checks="R-POOL-1 'partitions as concurrency' with static membership: a pool "
            "member (--instance-id) kill -9'd and restarted 0.5-2 s later, inside its 30 s "
            "session: no rebalance (every partition applied by one instance all run), the "
            "others' partitions keep flowing meanwhile, nothing lost, one effect per event",
            first_s=(1.0, 2.0),
            hold_s=(0.5, 2.0),
            gap_s=(2.0, 4.0),
            duration_s=20.0,
            workload=_pool(STATIC),
            checker=lambda rows: check(rows, PoolRules(static=True)),
        ),
        Scenario(
            name="pool-storm",
            number=6,
            fault=Fault.STORM,
            action=storm,
            checks="R-FAIL-1, R-FAIL-2 (a worker crashes mid-batch; a rebalance): "
            "every 1-3 s a member leaves (SIGTERM or kill -9, seeded) and starts again, or an "
            "extra member joins, never waiting for a joiner, key concurrency: "
            "nothing lost, at most one effect per event id, no partition's steps on two members "
            "at once, per-key order kept",
            hold_s=(0.5, 3.0),
            gap_s=(1.0, 3.0),
            duration_s=20.0,
            workload=_pool(STORM),
            checker=check,
        ),
        Scenario(
            name="poison-rebalance",
            number=17,
            fault=Fault.POISON_STORM,
            action=storm,
            checks="R-FAIL-3 'a poison message blocks a partition': retried "
            "with backoff (5 attempts, at most 6 in all whoever owns it), then dead-lettered with a reason and its key "
            "quarantined; later records of the key parked in order, never applied past it; "
            "other keys flow; members leave and join during its retries, and the rebalance "
            "loses no quarantine and applies nothing twice",
            first_s=(3.5, 5.0),
            hold_s=(0.5, 2.0),
            gap_s=(1.0, 3.0),
            duration_s=20.0,
            workload=_pool(POISON),
            checker=lambda rows: check(rows, POISON_RULES),
        ),
    )
}


def run_pool_planted(
    *,
    bootstrap: str,
    root: Path,
    duration_s: float = 10.0,
    rate_per_s: float = 10.0,
    drain_timeout_s: float = 20.0,
) -> tuple[Verdict, int]:
    """The pool workload with member ``m0`` carrying ``plant_commit_first`` (its offsets commit
    BEFORE the batch's transaction - effect rows and dedupe rows - and it dies in between, the
    8th time; ``pipeline/hooks.py``); a supervisor restarts it. Returns the verdict and the
    restarts: the checker must report the events whose offsets moved past them as lost."""
    root.mkdir(parents=True, exist_ok=True)
    history_path = root / "planted-pool-commit-first.jsonl"
    history = HistoryWriter(history_path)
    w = PoolWorkload(
        WorkloadConfig(
            bootstrap=bootstrap,
            root=root / "pool-commit-first",
            rate_per_s=rate_per_s,
            duration_s=duration_s,
            drain_timeout_s=drain_timeout_s,
        ),
        history,
        PoolSpec(members=2, partitions=4),
    )
    restarts = run_supervised(
        w, history, name="planted:pool-commit-first", proc="m0", fault="plant_commit_first"
    )
    return check(read_history(history_path)), restarts
