"""Test hooks, in one object passed through :mod:`pipeline.bootstrap` (never a public argument).

Production passes the default ``Hooks()`` (every hook off). Crash tests set a hook; the gateway
process sets one from ``FLEET_FAULT`` at its entry point (the environment is read at the edge).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.reasons import Config


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """``fault_after_commit(effects)``: called right after an inbox offset commit, before the
    forward path's injects run -- the crash window of seed 000 §5 invariant 5."""

    fault_after_commit: Callable[[int], None] | None = None


NO_HOOKS = Hooks()


def hooks_from_fault(fault: str | None) -> Hooks:
    """``FLEET_FAULT=crash_after_commit`` kills the process (exit 137) right after an offset
    commit that has injects pending. Crash tests only."""
    if fault is None:
        return NO_HOOKS
    if fault != "crash_after_commit":
        raise ConfigError(f"unknown FLEET_FAULT {fault!r}", reason=Config.CONFIG_INVALID)

    def crash(effects: int) -> None:
        if effects:
            import os

            os._exit(137)

    return Hooks(fault_after_commit=crash)
