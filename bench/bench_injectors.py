"""Inject cost of each built-in as a ratio to the bare call it wraps, measured in the same run.

* command: ``CommandInjector(["cat"])`` vs ``subprocess.run(["cat"], input=body)``
  (extra: own session, env vars, stderr temp file).
* tmux: ``TmuxInjector`` (a probe call, then text and Enter in one call) vs a bare
  ``send-keys -l TEXT ; send-keys Enter`` (one call): the price of the status gate.
* metered: ``MeteredInjector(CallbackInjector)`` vs ``CallbackInjector`` (metrics overhead).

Run: ``python -m bench injectors`` (``--quick`` does fewer rounds). Read the ratios.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
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
    MeteredInjector,
    TmuxInjector,
)

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
        injector = TmuxInjector(pane, socket=socket)
        text = BODY.decode()

        def bare() -> None:
            keys = [*tmux, "send-keys", "-t", pane, "-l", "--", text]
            subprocess.run([*keys, ";", "send-keys", "-t", pane, "Enter"], check=True)

        return _pair("tmux", lambda: injector.inject(body=BODY, **ARGS), bare, rounds)
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
    if shutil.which("tmux"):
        result |= _tmux(rounds)
    return result
