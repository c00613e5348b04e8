"""Injectors: the port the gateway's forward path calls, and the built-in adapters.

``Injector`` (port) <- ``CallbackInjector`` | ``CommandInjector`` (one process per brief) |
``LongLivedCommandInjector`` (one child, framed briefs) | ``TmuxInjector``;
``build_injector`` maps an ``InjectorSpec`` onto one; ``MeteredInjector`` adds metrics.
"""

from .callback import CallbackInjector
from .command import BUSY_EXIT, CommandInjector
from .factory import build_injector
from .long_lived import LongLivedCommandInjector
from .metrics import InjectMetrics, MeteredInjector
from .port import (
    INJECT_BODY_INVALID,
    INJECT_FAILED,
    INJECT_REASONS,
    INJECT_TIMEOUT,
    TARGET_BUSY,
    Injector,
    InjectUncertainError,
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
    "InjectUncertainError",
    "Injector",
    "LongLivedCommandInjector",
    "MeteredInjector",
    "PaneStatus",
    "TmuxInjector",
    "build_injector",
]
