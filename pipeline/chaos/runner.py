"""One scenario, ``repeat`` seeded repetitions: workload + nemesis + heal-and-drain + checker.

Each repetition gets fresh hosts, stores and topics (a new prefix) and its own history file
under ``root``; a scenario that kills the broker runs on a broker it starts itself
(:class:`~pipeline.kafka.local.LocalCluster`, one per scenario run), never on a shared one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LauncherConfig, LocalCluster

from .catalogue import SCENARIOS
from .checker import Finding, Verdict, check
from .history import HistoryWriter, read_history
from .nemesis import NemesisContext, Scenario, play
from .workload_config import WorkloadConfig


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    root: Path
    seed: int = 0
    repeat: int = 1
    bootstrap: str | None = None  # None: start a broker for the run
    rate_per_s: float = 10.0
    duration_s: float = 20.0


@dataclass(kw_only=True)
class ScenarioResult:
    scenario: str
    number: int
    checks: str
    repetitions: int = 0
    operations: int = 0
    sends: int = 0
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    unseen: int = 0
    refused: int = 0
    late: int = 0
    uncertain: int = 0
    findings: int = 0
    slowest_recovery_s: float | None = None
    examples: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    histories: list[str] = field(default_factory=list)
    # per repetition: wall seconds of each phase (start, stream, drain, quiet, collect, stop,
    # total) - where a repetition's time goes
    timings: list[dict[str, float]] = field(default_factory=list)
    asks: int = 0
    broadcasts: int = 0
    run_steps: int = 0
    bad: int = 0  # bad records written to an inbox (each rejected with a reason, or a finding)

    @property
    def ok(self) -> bool:
        return self.findings == 0 and not self.errors

    def add(self, v: Verdict, history: Path) -> None:
        self.repetitions += 1
        self.operations += v.operations
        self.sends += v.sends
        self.faults += v.faults
        self.lost += v.lost
        self.duplicated += v.duplicated
        self.out_of_order += v.out_of_order
        self.unseen += v.unseen
        self.refused += v.refused
        self.late += v.late
        self.uncertain += v.uncertain
        self.asks += v.asks
        self.broadcasts += v.broadcasts
        self.run_steps += v.run_steps
        self.bad += v.bad
        self.findings += len(v.findings)
        self.examples += list(v.findings[: max(0, 5 - len(self.examples))])
        if v.slowest_recovery_s is not None:
            self.slowest_recovery_s = max(self.slowest_recovery_s or 0.0, v.slowest_recovery_s)
        self.histories.append(str(history))

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "number": self.number, "checks": self.checks,
            "repetitions": self.repetitions, "operations": self.operations, "sends": self.sends,
            "faults": self.faults, "lost": self.lost, "duplicated": self.duplicated,
            "out_of_order": self.out_of_order, "unseen": self.unseen, "refused": self.refused,
            "late": self.late, "uncertain": self.uncertain, "asks": self.asks,
            "broadcasts": self.broadcasts, "run_steps": self.run_steps,
            "bad": self.bad, "findings": self.findings,
            "slowest_recovery_s": self.slowest_recovery_s, "ok": self.ok,
            "examples": [{"code": str(f.code), "msgId": f.msg_id, "detail": f.detail}
                         for f in self.examples],
            "errors": self.errors, "histories": self.histories, "timings": self.timings,
        }  # fmt: skip


def repetition(
    scenario: Scenario,
    cfg: RunConfig,
    rep: int,
    bootstrap: str,
    cluster: LocalCluster | None,
    timings: dict[str, float] | None = None,
) -> tuple[Verdict, Path]:
    """One seeded repetition; ``timings`` (when given) gets the wall seconds of its phases."""
    root = cfg.root / f"{scenario.name}-{rep}"
    history_path = cfg.root / f"{scenario.name}-{rep}.jsonl"
    history = HistoryWriter(history_path)
    rng = random.Random(f"{cfg.seed}:{scenario.name}:{rep}")
    duration = scenario.duration_s or cfg.duration_s
    w = scenario.workload(
        WorkloadConfig(
            bootstrap=bootstrap, root=root, rate_per_s=cfg.rate_per_s, duration_s=duration
        ),
        history,
    )
    try:
        w.setup()
        with scenario.rig(w, cluster) if scenario.rig else nullcontext() as rig:
            try:
                w.start()
                w.run_in_background()
                ctx = NemesisContext(workload=w, history=history, rng=rng, cluster=cluster, rig=rig)
                t_play = time.monotonic()
                play(scenario, ctx)
                w.join()
                # the stream and the faults: longer than the stream when the last recovery is
                w.timings["faults_s"] = round(time.monotonic() - t_play, 3)
                w.drain()
                w.collect()
            finally:
                w.stop()  # inside the rig: a gateway must stop before its disk is unmounted
    finally:
        w.stop()
        history.close()
        if timings is not None:
            timings.update(w.timings)
    rows = read_history(history_path)
    if scenario.checker is not None:
        return scenario.checker(rows), history_path
    return check(rows, strict=scenario.strict), history_path


def _broker(directory: Path, scenario: Scenario) -> LocalCluster:
    if scenario.broker is not None:
        return scenario.broker(directory)
    return LocalCluster(
        # a shared 2-core machine starts three JVMs slowly: more than the launcher's 90 s
        LauncherConfig(
            directory=directory, nodes=scenario.nodes, heap_mb=512, ready_timeout_s=240.0
        ),
        owned=True,
    ).start()


def run_scenario(
    name: str, cfg: RunConfig, progress: Callable[[str], None] = lambda _m: None
) -> ScenarioResult:
    scenario = SCENARIOS[name]
    result = ScenarioResult(scenario=name, number=scenario.number, checks=scenario.checks)
    cluster = None
    cfg.root.mkdir(parents=True, exist_ok=True)
    try:
        if scenario.own_broker or cfg.bootstrap is None:
            cluster = _broker(cfg.root / f"broker-{name}", scenario)
        bootstrap = cluster.bootstrap_servers if cluster is not None else cfg.bootstrap
        assert bootstrap is not None
        for rep in range(cfg.repeat):
            t0 = time.monotonic()
            timings: dict[str, float] = {}
            try:
                verdict, path = repetition(scenario, cfg, rep, bootstrap, cluster, timings)
            except Exception as exc:  # noqa: BLE001 - a repetition that could not run is an error row, not a pass
                result.errors.append(f"rep {rep}: {type(exc).__name__}: {exc}")
                progress(f"{name} #{rep}: ERROR {exc}")
                continue
            result.add(verdict, path)
            timings["total_s"] = round(time.monotonic() - t0, 3)
            result.timings.append(timings)
            phases = ", ".join(f"{k[:-2]} {v:.1f}" for k, v in timings.items())
            progress(
                f"{name} #{rep}: {verdict.sends} sends, {verdict.asks} asks, "
                f"{verdict.broadcasts} broadcasts, {verdict.run_steps} run steps, "
                f"{verdict.faults} faults, {len(verdict.findings)} findings ({phases} s)"
            )
    finally:
        if cluster is not None:
            cluster.stop()
    return result
