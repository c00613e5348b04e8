"""Inject cost of each built-in as a ratio to the bare call it wraps, measured in the same run.

* command: ``CommandInjector(["cat"])`` vs ``subprocess.run(["cat"], input=body)``
  (extra: own session, env vars, stderr temp file).
* tmux: ``TmuxInjector`` (a probe call, then text and Enter in one call) vs a bare
  ``send-keys -l TEXT ; send-keys Enter`` (one call): the price of the status gate.
* metered: ``MeteredInjector(CallbackInjector)`` vs ``CallbackInjector`` (metrics overhead).
* long-lived vs one-shot: ``LongLivedCommandInjector`` (one reference child,
  ``pipeline.gateway.injectors.child``, fed framed briefs) vs ``CommandInjector(["true"])`` (a
  process per brief, what ``bench.latency``'s worker-b runs): latency and CPU per inject, the
  injecting process's own and the target's (the reaped ``true``s; the child, from ``/proc``).
* tmux control vs process: ``TmuxInjector`` over one control-mode client vs one ``tmux``
  process per call: latency and CPU per inject, the injector's process, its children and the
  tmux server.

Run: ``python -m bench injectors`` (``--quick`` does fewer rounds). Read the ratios.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from pipeline.gateway.injectors import (
    CallbackInjector,
    CommandInjector,
    InjectMetrics,
    LongLivedCommandInjector,
    MeteredInjector,
    TmuxInjector,
)
from pipeline.support import procfs

ARGS = {"gid": "w1", "msg_id": "m-1", "kind": "SEND", "sender": "main"}
BODY = b"# " + b"brief " * 170  # ~1 KiB; a comment, so a shell pane ignores it


def _median_s(fn: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _pair(
    name: str, ours: Callable[[], object], base: Callable[[], object], rounds: int
) -> dict[str, Any]:
    ours(), base()  # warm-up
    ours_s, base_s = _median_s(ours, rounds), _median_s(base, rounds)
    return {
        f"{name}_p50_ms": round(ours_s * 1e3, 3),
        f"{name}_baseline_p50_ms": round(base_s * 1e3, 3),
        f"{name}_ratio": round(ours_s / base_s, 2),
    }


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cost(fn: Callable[[], object], rounds: int, pids: Callable[[], list[int]]) -> dict[str, float]:
    """p50 latency and CPU per call: this process's, its reaped children's, and ``pids``'."""
    fn()  # warm-up (a long-lived child starts here)
    watched = pids()
    others0 = sum(procfs.cpu_s(p) or 0.0 for p in watched)
    own0, kids0 = time.process_time(), _children_cpu_s()
    wall = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
    own, kids = time.process_time() - own0, _children_cpu_s() - kids0
    target = kids + sum(procfs.cpu_s(p) or 0.0 for p in watched) - others0
    return {
        "p50_ms": round(statistics.median(wall) * 1e3, 3),
        "own_cpu_us": round(own / rounds * 1e6, 1),
        "target_cpu_us": round(target / rounds * 1e6, 1),
        "total_cpu_us": round((own + target) / rounds * 1e6, 1),
    }


def _compare(name: str, ours: dict[str, float], base: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {name: ours, f"{name}_baseline": base}
    for k in ("p50_ms", "own_cpu_us", "total_cpu_us"):
        out[f"{name}_{k}_ratio"] = round(ours[k] / base[k], 3) if base[k] else None
    return out


def _long_lived(rounds: int) -> dict[str, Any]:
    child = [sys.executable, "-m", "pipeline.gateway.injectors.child"]
    served, once = LongLivedCommandInjector(child), CommandInjector(["true"])
    try:
        ours = _cost(
            lambda: served.inject(body=BODY, **ARGS),
            rounds,
            lambda: [served._proc.pid] if served._proc is not None else [],
        )
        base = _cost(lambda: once.inject(body=BODY, **ARGS), rounds, list)
    finally:
        served.close()
    return _compare("long_lived_command", ours, base)


def _tmux(rounds: int) -> dict[str, Any]:
    socket = f"fleet-bench-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket]
    subprocess.run(
        [*tmux, "-f", "/dev/null", "new-session", "-d", "-s", "b", "bash --norc"], check=True
    )
    try:
        pane = subprocess.run(
            [*tmux, "display", "-p", "-t", "b", "#{pane_id}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        while (
            subprocess.run(
                [*tmux, "display", "-p", "-t", pane, "#{pane_current_command}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            != "bash"
        ):
            time.sleep(0.05)
        injector = TmuxInjector(pane, socket=socket, control=False)
        text = BODY.decode()

        def bare() -> None:
            keys = [*tmux, "send-keys", "-t", pane, "-l", "--", text]
            subprocess.run([*keys, ";", "send-keys", "-t", pane, "Enter"], check=True)

        result = _pair("tmux", lambda: injector.inject(body=BODY, **ARGS), bare, rounds)
        server = int(
            subprocess.run(
                [*tmux, "display", "-p", "#{pid}"], capture_output=True, text=True, check=True
            ).stdout
        )
        control = TmuxInjector(pane, socket=socket)
        try:
            ours = _cost(lambda: control.inject(body=BODY, **ARGS), rounds, lambda: [server])
            base = _cost(lambda: injector.inject(body=BODY, **ARGS), rounds, lambda: [server])
            assert control.attaches == 1, "the control client was replaced mid-bench"
        finally:
            control.close()
        return result | _compare("tmux_control", ours, base)
    finally:
        path = subprocess.run(
            [*tmux, "display", "-p", "#{socket_path}"], capture_output=True, text=True, check=False
        ).stdout.strip()
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
        if path:  # tmux leaves its socket file behind
            Path(path).unlink(missing_ok=True)


def main(quick: bool) -> dict[str, Any]:
    rounds = 20 if quick else 100
    result: dict[str, Any] = {"rounds": rounds, "body_bytes": len(BODY)}
    command = CommandInjector(["cat"])
    result |= _pair(
        "command",
        lambda: command.inject(body=BODY, **ARGS),
        lambda: subprocess.run(["cat"], input=BODY, stdout=subprocess.DEVNULL, check=True),
        rounds,
    )
    plain = CallbackInjector(lambda **_: None)
    metered = MeteredInjector(plain, InjectMetrics(CollectorRegistry()), injector="callback")
    result |= _pair(
        "metered_callback",
        lambda: [metered.inject(body=BODY, **ARGS) for _ in range(1000)],
        lambda: [plain.inject(body=BODY, **ARGS) for _ in range(1000)],
        rounds,
    )
    result |= _long_lived(rounds * 20)  # the child's CPU is read in 10 ms ticks
    if shutil.which("tmux"):
        result |= _tmux(rounds)
    return result
