"""One gateway's wall clock skewed (clock-skew): host B restarted with its Python wall clock
offset, inside ``clock_skew_s`` and beyond it, then restarted on the true clock.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LocalCluster

from .nemesis import NemesisContext
from .workload import Workload

CLOCK_SKEW_S = 30.0  # gateway config clock_skew_s (the workload keeps the default)

# Only the skewed gateway's Python wall clock moves: a sitecustomize.py on its PYTHONPATH offsets
# time.time and time.time_ns, through which every wall-clock reading of the fleet goes (envelope
# ts and expiresAt, presence ts, deadlines, the verifier's "now"); the monotonic clock, timed
# waits and librdkafka are untouched, as on a host whose NTP is off. libfaketime (LD_PRELOAD) was
# used first and is unusable here: with any offset the process's librdkafka never completes a
# metadata request (libfaketime 0.9.10, librdkafka 2.16: a bare AdminClient.list_topics times out
# at -20 s and fails with a transport error at +20 s, while the broker connection itself comes
# up), so the "skewed" gateway never got past its topology step and never ran.
# Only the skewed gateway's Python wall clock moves: a sitecustomize.py on its PYTHONPATH offsets
# time.time and time.time_ns, through which every wall-clock reading of the fleet goes (envelope
# ts and expiresAt, presence ts, deadlines, the verifier's "now"); the monotonic clock, timed
# waits and librdkafka are untouched, as on a host whose NTP is off. libfaketime (LD_PRELOAD) was
# used first and is unusable here: with any offset the process's librdkafka never completes a
# metadata request (libfaketime 0.9.10, librdkafka 2.16: a bare AdminClient.list_topics times out
# at -20 s and fails with a transport error at +20 s, while the broker connection itself comes
# up), so the "skewed" gateway never got past its topology step and never ran.
SKEW_ENV = "FLEET_CHAOS_CLOCK_OFFSET_S"
_SHIM = f'''"""chaos clock-skew shim (pipeline/chaos/skewed_clock.py): wall clock + {SKEW_ENV}."""
import os
import time

_offset_s = float(os.environ.get("{SKEW_ENV}", "0"))
if _offset_s:
    _time, _time_ns, _offset_ns = time.time, time.time_ns, round(_offset_s * 1e9)
    time.time = lambda: _time() + _offset_s
    time.time_ns = lambda: _time_ns() + _offset_ns

# Python imports one sitecustomize: the next one on the path (a test harness's) runs after this
import importlib.util as _util
import sys as _sys

_here = os.path.dirname(os.path.abspath(__file__))
for _dir in _sys.path:
    _next = os.path.join(_dir, "sitecustomize.py")
    if os.path.abspath(_dir or ".") != _here and os.path.isfile(_next):
        _spec = _util.spec_from_file_location("_next_sitecustomize", _next)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(_util.module_from_spec(_spec))
        break
'''
SKEWED_READY_S = 120.0  # bound on the skewed gateway's start (slow on a loaded machine)


@dataclass(kw_only=True)
class SkewRig:
    shim: Path
    faults: int = 0


@contextlib.contextmanager
def skew_rig(w: Workload, own_cluster: LocalCluster | None) -> Iterator[SkewRig]:
    yield SkewRig(shim=write_skew_shim(w.root))


def write_skew_shim(root: Path) -> Path:
    """The directory to put on a skewed gateway's PYTHONPATH (:func:`skew_env`)."""
    shim = root / "clock-skew-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM)
    return shim


def skew_env(shim: Path, offset_s: float) -> dict[str, str]:
    """The environment of a gateway whose wall clock is off by ``offset_s``."""
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return {SKEW_ENV: f"{offset_s:+.3f}", "PYTHONPATH": path}


def clock_skew(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """Restart host B with its wall clock off by an offset inside ``clock_skew_s`` (odd faults)
    or beyond it (even ones), sign drawn by ``ctx.rng``; ``hold`` counts from B's running line (a
    skew that never ran proves nothing); the heal restarts it on the true clock."""
    rig: SkewRig = ctx.rig
    beyond = rig.faults % 2 == 1
    rig.faults += 1
    size = ctx.rng.uniform(1.5, 3.0) if beyond else ctx.rng.uniform(0.2, 0.7)
    offset = ctx.rng.choice((-1, 1)) * size * CLOCK_SKEW_S
    b = ctx.workload.procs["B"]
    before = dict(b.env)
    b.stop()
    b.env = {**before, **skew_env(rig.shim, offset)}
    b.start()
    t0 = time.monotonic()
    while not b.ready() and b.alive and time.monotonic() - t0 < SKEWED_READY_S:
        time.sleep(0.2)
    ran = b.ready()
    ready_s = time.monotonic() - t0
    if ran:
        time.sleep(hold)
    b.stop()
    b.env = before
    b.start()
    return "B", {
        "offset_s": round(offset),
        "beyond": beyond,
        "skewed_ran": ran,
        "skewed_ready_s": round(ready_s, 3),
        "skewed_s": round(hold, 3) if ran else 0.0,
    }
