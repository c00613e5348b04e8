"""Injectors: the port the gateway's forward path calls, and the built-in adapters.

``Injector`` (port) <- ``CallbackInjector`` | ``CommandInjector`` | ``TmuxInjector``;
``build_injector`` maps an ``InjectorSpec`` onto one; ``MeteredInjector`` adds metrics.
"""

from .callback import CallbackInjector
from .command import BUSY_EXIT, CommandInjector
from .factory import build_injector
from .metrics import InjectMetrics, MeteredInjector
from .port import (
    INJECT_BODY_INVALID,
    INJECT_FAILED,
    INJECT_REASONS,
    INJECT_TIMEOUT,
    TARGET_BUSY,
    Injector,
)
from .tmux import PaneStatus, TmuxInjector

__all__ = [
    "BUSY_EXIT",
    "INJECT_BODY_INVALID",
    "INJECT_FAILED",
    "INJECT_REASONS",
    "INJECT_TIMEOUT",
    "TARGET_BUSY",
    "CallbackInjector",
    "CommandInjector",
    "InjectMetrics",
    "Injector",
    "MeteredInjector",
    "PaneStatus",
    "TmuxInjector",
    "build_injector",
]
