"""The knee: the highest offered rate at which send -> held p99 stays within its limit.

One run per repeat: two gateways (:mod:`bench.latency`), the latency rows' mix (half REPLYs, half
briefs), offered at each step of :data:`STEPS` in turn on the same gateways -- each step waits
until every message of the one before arrived -- stopping after the first step that fails. A step
passes when send -> held p99 is at most :data:`LIMIT_MS`, every message arrived and the sender
really offered the step's rate. The knee of a
repeat is the last step that passed before the first that failed (0: the first step failed;
steps after a failure never count, even if a later one would read lower).
"""

from __future__ import annotations

from typing import Any

from . import latency

STEPS = (500, 1000, 1500, 2000, 2500, 3000)
LIMIT_MS = 50.0
MIX = "both"


OFFERED_SHARE = 0.95  # a step the sender could not offer at this share of its rate is not passed


def passed(phase: dict[str, Any], limit_ms: float = LIMIT_MS) -> bool:
    """A step passes: p99 measured, within the limit, nothing sent left unarrived, and the rate
    really offered (a sender falling behind would pass a step at a rate it never sent)."""
    p99 = phase.get("send_to_held_ms", {}).get("p99")
    offered = phase.get("offered_msg_per_s", 0)
    return (
        p99 is not None
        and p99 <= limit_ms
        and latency._not_arrived(phase) == 0
        and phase.get("achieved_msg_per_s", 0) >= OFFERED_SHARE * offered
    )


def knee_of(steps: list[tuple[int, bool]]) -> int:
    """The highest rate that passed before the first failure, over steps in offered order."""
    knee = 0
    for rate, ok in steps:
        if not ok:
            break
        knee = rate
    return knee


def of_run(run: dict[str, Any], steps: tuple[int, ...] = STEPS) -> dict[str, Any]:
    """One repeat: each step measured (rate, p99, passed), its knee and each gateway's
    :func:`rate_split`. A run that ended in an error has a knee only up to what it measured; the
    error is kept beside it."""
    measured = []
    for rate in steps:
        phase = run.get(f"at_{rate}")
        if phase is None:
            break
        measured.append((rate, phase, passed(phase)))
    out: dict[str, Any] = {
        # nothing measured (the run failed before its first step): no knee, not a knee of 0
        "knee_msg_per_s": knee_of([(rate, ok) for rate, _, ok in measured]) if measured else None,
        "steps": [_step(rate, phase, ok) for rate, phase, ok in measured],
    }
    out["rate_split"] = {
        name: split for name in GATEWAYS if (split := rate_split(out, name)) is not None
    }
    if measured and all(ok for *_, ok in measured) and len(measured) < len(steps):
        out["incomplete"] = True  # stopped early by an error, not by a failed step
    if "error" in run:
        out["error"] = run["error"]
    return out


def _step(rate: int, phase: dict[str, Any], ok: bool) -> dict[str, Any]:
    """One step as the result keeps it: its p99, whether it passed, and what it cost the
    machine -- the share of its cores busy and each process's CPU per message (the gateways,
    the broker, the PostgreSQL server, the bench's sender), which say why a step failed."""
    return {
        "offered": rate,
        "held_p99_ms": phase.get("send_to_held_ms", {}).get("p99"),
        "passed": ok,
        "machine_busy": phase.get("cpu", {}).get("machine_busy"),
        "cpu_us_per_msg": phase.get("cpu_us_per_msg"),
        # per gateway: its threads put on a CPU a second, and their wait for one (ms a second)
        **{
            key: value
            for key, value in phase.get("cpu", {}).items()
            if key.endswith(("_runs_per_s", "_runqueue_ms_per_s"))
        },
    }


GATEWAYS = ("gateway_A", "gateway_B")


def past_the_knee(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per repeat, the first step that failed: the share of the cores busy, the CPU per message
    of every process, and of every process but the gateways (a repeat that failed no step, or
    whose failed step has no CPU figures, adds none)."""
    busy: list[float] = []
    every: list[float] = []
    others: list[float] = []
    for run in runs:
        failed = next((s for s in run.get("steps", []) if not s["passed"]), None)
        cpu = (failed or {}).get("cpu_us_per_msg")
        if failed is None or not cpu or failed.get("machine_busy") is None:
            continue
        busy.append(float(failed["machine_busy"]))
        every.append(float(sum(cpu.values())))
        others.append(float(sum(v for k, v in cpu.items() if k not in GATEWAYS)))
    return {"machine_busy": busy, "all_us_per_msg": every, "not_gateways_us_per_msg": others}


MIN_STEPS_FOR_SPLIT = 3  # a line through two points would fit any two figures exactly


def rate_split(run: dict[str, Any], name: str) -> dict[str, float] | None:
    """One process's CPU over one repeat's steps as ``cores = fixed + margin x rate``: the least
    squares line through each step's (offered rate, cores used), a step's cores being its CPU
    per message times its rate. ``margin_us_per_msg`` (the slope) is what one more message a
    second costs; ``fixed_cores`` (the intercept) is what the process spends a second that does
    not grow with the rate over the steps' range (waking its threads for each batch: once the
    spacings cap the batches a second, more messages make the batches larger, not more). Figures
    at 500 msg/s then read ``fixed_cores / 500 + margin``. ``None`` below
    :data:`MIN_STEPS_FOR_SPLIT` steps with figures."""
    points = [
        (float(s["offered"]), float(s["cpu_us_per_msg"][name]) * s["offered"] / 1e6)
        for s in run.get("steps", [])
        if (s.get("cpu_us_per_msg") or {}).get(name)
    ]
    if len(points) < MIN_STEPS_FOR_SPLIT:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    fixed = mean_y - slope * mean_x
    ss_tot = sum((y - mean_y) ** 2 for _, y in points)
    ss_res = sum((y - fixed - slope * x) ** 2 for x, y in points)
    return {
        "margin_us_per_msg": round(slope * 1e6, 1),
        "fixed_cores": round(fixed, 3),
        "r2": round(1 - ss_res / ss_tot, 3) if ss_tot > 0 else 1.0,
        "steps": n,
    }


def rate_splits(runs: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per gateway, each repeat's :func:`rate_split` figures (repeats without one add none)."""
    out: dict[str, dict[str, list[float]]] = {}
    for name in GATEWAYS:
        for run in runs:
            split = rate_split(run, name)
            if split is None:
                continue
            for key in ("margin_us_per_msg", "fixed_cores"):
                out.setdefault(name, {}).setdefault(key, []).append(split[key])
    return out


def repeats(
    bootstrap: str,
    *,
    store: str,
    n: int,
    seconds: float,
    steps: tuple[int, ...] = STEPS,
    injector: str = "one-shot",
) -> dict[str, Any]:
    runs = []
    stores = latency.Stores(store)
    try:
        for _ in range(n):
            urls, server = stores.next()
            run = latency.run_once(
                bootstrap,
                phases=tuple((f"at_{r}", r, MIX) for r in steps),
                until=lambda phase: not passed(phase),
                seconds=seconds,
                store_urls=urls,
                floor=False,
                server_pid=server,
                injector=injector,
            )
            runs.append(of_run(run, steps))
    finally:
        stores.close()
    knees = [float(r["knee_msg_per_s"]) for r in runs if r["knee_msg_per_s"] is not None]
    return {
        "store": store,
        "limit_ms": LIMIT_MS,
        "mix": MIX,
        "injector": injector,
        "knee_msg_per_s": latency.spread(knees) if knees else None,
        "knee_per_repeat": [r["knee_msg_per_s"] for r in runs],
        "past_the_knee": {k: latency.spread(v) for k, v in past_the_knee(runs).items() if v},
        "rate_split": {
            name: {k: latency.spread(v) for k, v in figures.items()}
            for name, figures in rate_splits(runs).items()
        },
        "runs": runs,
    }
