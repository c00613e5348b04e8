"""Test hooks, in one object passed through :mod:`pipeline.bootstrap` (never a public argument).

Production passes the default ``Hooks()`` (every hook off). Crash tests set a hook; the gateway
process sets one from ``FLEET_FAULT`` at its entry point (the environment is read at the edge).

Two sorts of hook:

* **crash points** -- ``fault_after_commit`` (R-ACK-3's window) and ``crash``
  (called with the name of a :class:`Window`): a test makes the process die exactly there;
* **planted bugs** -- the three orderings R-ACK-2, R-ACK-8 and R-OUT-4 forbid, switched on only so
  that the chaos suite can show its checker catching them (``docs/chaos.md`` "Planted bugs"):
  ``commit_before_transaction`` (the inbox offset committed before the batch's transaction),
  ``dedupe_own_transaction`` (dedupe rows committed in a transaction of their own, before the
  effects') and ``ack_before_delivery_report`` (outbox rows marked sent before the broker's
  delivery report). Each comes with a crash in the window it opens (``FLEET_FAULT=plant_*``):
  the bug and the fault that makes it bite.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pipeline.errors import ConfigError
from pipeline.reasons import Config


class Window(StrEnum):
    """Named crash points (``Hooks.crash``): three inside the window a planted bug opens, two in
    windows the code is built to survive (R-FAIL-4: the relay may publish twice; R-ACK-4: an
    inject that cannot be recorded in its own transaction: the inject journal)."""

    COMMITTED_BEFORE_TRANSACTION = "committed_before_transaction"  # runtime: offsets, no rows
    DEDUPE_COMMITTED_ALONE = "dedupe_committed_alone"  # runtime: dedupe rows, no effects
    ACKED_BEFORE_REPORT = "acked_before_report"  # relay: rows marked sent, nothing produced
    REPORTED_NOT_MARKED = "reported_not_marked"  # relay: delivery reports in, rows still pending
    INJECTED_NOT_RECORDED = "injected_not_recorded"  # inject returned, journal row still open
    LAUNCHED_NOT_LIVE = "launched_not_live"  # control: a worker started, its row not yet live


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """``fault_after_commit(effects)``: called right after an inbox offset commit, before the
    forward path's injects run -- the crash window of R-ACK-3. ``crash(window)``:
    called at each :class:`Window` a planted bug opens. The three ``bool`` fields plant bugs
    (module docstring); all off in production."""

    fault_after_commit: Callable[[int], None] | None = None
    crash: Callable[[str], None] | None = None
    commit_before_transaction: bool = False
    dedupe_own_transaction: bool = False
    ack_before_delivery_report: bool = False

    def at(self, window: Window) -> None:
        if self.crash is not None:
            self.crash(str(window))


NO_HOOKS = Hooks()

# the Nth time a planted bug's window is reached (with work in it), the process dies there:
# late enough that the fleet is up and the stream flowing, early enough to bite in a short run
PLANT_CRASH_AT = 8


def _exit_at(window: Window, nth: int) -> Callable[[str], None]:
    seen = 0

    def crash(name: str) -> None:
        nonlocal seen
        if name != window:
            return
        seen += 1
        if seen == nth:
            os._exit(137)

    return crash


_PLANTS = {
    "plant_commit_first": lambda: Hooks(
        commit_before_transaction=True,
        crash=_exit_at(Window.COMMITTED_BEFORE_TRANSACTION, PLANT_CRASH_AT),
    ),
    "plant_dedupe_apart": lambda: Hooks(
        dedupe_own_transaction=True,
        crash=_exit_at(Window.DEDUPE_COMMITTED_ALONE, PLANT_CRASH_AT),
    ),
    "plant_ack_first": lambda: Hooks(
        ack_before_delivery_report=True,
        crash=_exit_at(Window.ACKED_BEFORE_REPORT, PLANT_CRASH_AT),
    ),
}
PLANTED = tuple(_PLANTS)
_WINDOWS = {
    "crash_before_mark_sent": Window.REPORTED_NOT_MARKED,
    "crash_after_inject": Window.INJECTED_NOT_RECORDED,
    "crash_after_launch": Window.LAUNCHED_NOT_LIVE,
}
CRASHES = ("crash_after_commit", *_WINDOWS)


def hooks_from_fault(fault: str | None, at: str | None = None) -> Hooks:
    """``FLEET_FAULT=crash_after_commit`` kills the process (exit 137) right after an offset
    commit that has injects pending; ``crash_before_mark_sent`` right after a relay batch's
    delivery reports came in, before its rows are marked sent; ``crash_after_inject`` right after
    an inject returned, before its journal row is closed; ``crash_after_launch`` right after a
    spawned worker started, before its row is ``live``; ``FLEET_FAULT_AT=n`` (``at``)
    makes it the n-th such moment instead of the first. ``FLEET_FAULT=plant_*``
    (:data:`PLANTED`) plants one bug and kills the process the :data:`PLANT_CRASH_AT`-th time
    its window is reached. Tests only."""
    if fault is None:
        return NO_HOOKS
    try:
        nth = 1 if at is None else int(at)
    except ValueError:
        nth = 0
    if nth < 1:
        raise ConfigError(f"FLEET_FAULT_AT must be a positive integer, got {at!r}",
                          reason=Config.CONFIG_INVALID)  # fmt: skip
    if fault in _PLANTS:
        return _PLANTS[fault]()
    if fault in _WINDOWS:
        return Hooks(crash=_exit_at(_WINDOWS[fault], nth))
    if fault != "crash_after_commit":
        raise ConfigError(f"unknown FLEET_FAULT {fault!r}", reason=Config.CONFIG_INVALID)
    seen = 0

    def crash(effects: int) -> None:
        nonlocal seen
        if effects:
            seen += 1
            if seen == nth:
                os._exit(137)

    return Hooks(fault_after_commit=crash)
