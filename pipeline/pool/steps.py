"""Step functions a member can run: ``--handler module:function``, ``--command CMD``, ``--sleep``.

A step takes the :class:`~pipeline.record.Record` and returns its result (anything JSON can
encode, ``str`` or ``bytes``); raising means the attempt failed and the runtime's one failure
decision applies (retry with backoff, then quarantine or dead-letter, R-FAIL-3).
"""

from __future__ import annotations

import importlib
import json
import random
import subprocess
import time
from collections.abc import Callable
from typing import Any

from pipeline.errors import ConfigError
from pipeline.reasons import Pool
from pipeline.record import Record

StepFn = Callable[[Record], Any]


def load_handler(spec: str) -> StepFn:
    """``package.module:function``, called with the record."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(
            f"--handler {spec!r}: expected module:function", reason=Pool.INVALID_HANDLER
        )
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--handler {spec!r}: {exc}", reason=Pool.INVALID_HANDLER) from exc
    if not callable(fn):
        raise ConfigError(f"--handler {spec!r} is not callable", reason=Pool.INVALID_HANDLER)
    return fn  # type: ignore[no-any-return]


class CommandStep:
    """Runs ``CMD`` through the shell with the record value on stdin; stdout is the result, a
    non-zero exit a failed attempt. ``FLEET_KEY``/``FLEET_PARTITION``/``FLEET_OFFSET`` are set."""

    def __init__(self, command: str, *, timeout_s: float | None = None) -> None:
        self.command = command
        self.timeout_s = timeout_s

    def __call__(self, record: Record) -> str:
        import os

        env = dict(os.environ)
        env.update(
            FLEET_KEY=record.key_str or "",
            FLEET_PARTITION=str(record.partition),
            FLEET_OFFSET=str(record.offset),
        )
        done = subprocess.run(
            self.command,
            shell=True,
            input=record.value or b"",
            capture_output=True,
            timeout=self.timeout_s,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise RuntimeError(f"command exited {done.returncode}: {err}")
        return done.stdout.decode("utf-8", "replace")


class SleepStep:
    """A simulated agent step: sleeps a fixed time or a draw from a distribution.

    ``SPEC`` is ``2.0``, ``uniform:1:3``, ``exp:2.0`` (mean) or ``lognormal:2.0:0.5`` (mean,
    sigma). A record whose value is JSON with a numeric ``step_s`` sleeps that instead; ``scale``
    multiplies every sleep (time-scaled experiments)."""

    def __init__(self, spec: str, *, scale: float = 1.0, seed: int | None = None) -> None:
        self.spec = spec
        self.scale = scale
        self._rng = random.Random(seed)
        self._draw = self._parse(spec)

    def _parse(self, spec: str) -> Callable[[], float]:
        kind, *args = spec.split(":")
        try:
            nums = [float(a) for a in args]
            if not args:
                fixed = float(kind)
                return lambda: fixed
            if kind == "uniform" and len(nums) == 2:
                return lambda: self._rng.uniform(nums[0], nums[1])
            if kind == "exp" and len(nums) == 1:
                return lambda: self._rng.expovariate(1.0 / nums[0])
            if kind == "lognormal" and len(nums) == 2:
                import math

                mu = math.log(nums[0]) - nums[1] ** 2 / 2
                return lambda: self._rng.lognormvariate(mu, nums[1])
        except ValueError:
            pass
        raise ConfigError(
            f"--sleep {spec!r}: expected SECONDS, uniform:LO:HI, exp:MEAN or lognormal:MEAN:SIGMA",
            reason=Pool.INVALID_HANDLER,
        )

    def __call__(self, record: Record) -> dict[str, Any]:
        step_s = None
        try:
            body = json.loads(record.value or b"")
            if isinstance(body, dict) and isinstance(body.get("step_s"), int | float):
                step_s = float(body["step_s"])
        except (ValueError, UnicodeDecodeError):
            pass
        seconds = max(0.0, (self._draw() if step_s is None else step_s) * self.scale)
        time.sleep(seconds)
        return {"slept_s": seconds}
