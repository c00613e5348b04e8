"""Gateway faults aimed at one crash window, and a twin with the same host id (catalogue
numbers 2, 4 and 10 in ``docs/chaos.md``).

* :func:`crash_after_commit` (#2) and :func:`crash_before_mark_sent` (#10) arm a gateway with a
  crash hook (``FLEET_FAULT`` + ``FLEET_FAULT_AT``, ``pipeline/hooks.py``): kill -9 it at a
  random point, restart it armed, wait until it kills itself at the n-th time it is inside the
  window (n drawn from the scenario's seed), then restart it clean. Each fault is therefore two
  kills: one anywhere, one exactly in the window.
* :func:`twin` (#4) starts a second gateway process with host B's config (same host id, same
  store, same key) beside the running one, holds, then kill -9s whichever copy is extra (a
  kill, not a SIGTERM: a clean stop would tombstone B's presence for both) and restarts B if it
  was the one that lost. The heal row records both exit codes: exit 3 is "fenced, fails loudly".
"""

from __future__ import annotations

import time
from typing import Any

from .gateway_process import GatewayProc
from .nemesis import Fault, NemesisContext, Scenario

FENCED_EXIT = 3


def _armed_crash(
    ctx: NemesisContext, host: str, fault: str, hold: float
) -> tuple[str, dict[str, Any]]:
    p = ctx.workload.procs[host]
    nth = ctx.rng.randint(1, 5)
    p.env.update({"FLEET_FAULT": fault, "FLEET_FAULT_AT": str(nth)})
    p.kill9()
    p.start()
    deadline = time.monotonic() + hold
    while p.alive and time.monotonic() < deadline:
        time.sleep(0.1)
    crashed = not p.alive
    code = p.exit_code if crashed else None
    if not crashed:
        p.kill9()  # the window never came (no work): end this armed incarnation anyway
    for k in ("FLEET_FAULT", "FLEET_FAULT_AT"):
        p.env.pop(k, None)
    p.start()
    return host, {"window": fault, "nth": nth, "crashed_in_window": crashed, "exit_code": code}


def crash_after_commit(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """#2: host B dies after an inbox offset commit with injects pending, before they run."""
    return _armed_crash(ctx, "B", "crash_after_commit", hold)


def crash_before_mark_sent(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """#10: host A (whose relay ships every send) dies after a batch's delivery reports came
    in, before its rows are marked sent."""
    return _armed_crash(ctx, "A", "crash_before_mark_sent", hold)


def twin(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """#4: a second gateway with host id B for ``hold`` seconds."""
    w = ctx.workload
    b = w.procs["B"]
    twin = GatewayProc(b.config, w.root / "B-twin.log", name="B-twin").start()
    time.sleep(hold)
    b_code, twin_code = b.exit_code, twin.exit_code
    twin.kill9()
    if not b.alive:
        b.start()
    return "B", {
        "held_s": round(hold, 3),
        "b_exit": b_code,
        "twin_exit": twin_code,
        "fenced": FENCED_EXIT in (b_code, twin_code),
    }


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="commit-inject",
            number=2,
            fault=Fault.CRASH_AFTER_COMMIT,
            action=crash_after_commit,
            checks="R-ACK-3 forward path, ack before inject: host B kill -9'd between an "
            "inbox offset commit and the injects it releases; a brief is never injected twice, "
            "a lost inject is one FAILED at the sender",
            hold_s=(15.0, 20.0),  # the bound on waiting for the armed crash
            gap_s=(1.0, 3.0),
        ),
        Scenario(
            name="twin-host",
            number=4,
            fault=Fault.TWIN,
            action=twin,
            checks="R-TOP-3 'a second gateway fails loudly': a second host-B gateway "
            "(same host id, store and key) for 8-15 s; one copy is fenced (exit 3), nothing is "
            "held or injected twice, nothing lost",
            hold_s=(8.0, 15.0),
            gap_s=(2.0, 4.0),
        ),
        Scenario(
            name="relay-mark-sent",
            number=10,
            fault=Fault.CRASH_BEFORE_MARK_SENT,
            action=crash_before_mark_sent,
            checks="R-FAIL-4 'the outbox relay publishes twice': host A (whose relay ships "
            "every send) kill -9'd after a batch's delivery reports, before marking its rows "
            "sent; the rows are sent again and the recipient's dedupe drops the copies",
            hold_s=(15.0, 20.0),
            gap_s=(1.0, 3.0),
        ),
    )
}
