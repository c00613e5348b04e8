"""Turn an ``InjectorSpec`` from the config into a concrete injector."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pipeline.errors import ConfigError
from pipeline.host.entity_config import InjectorSpec
from pipeline.reasons import Config

from .callback import CallbackInjector
from .command import CommandInjector
from .long_lived import LongLivedCommandInjector
from .metrics import InjectMetrics, MeteredInjector
from .port import Injector
from .tmux import TmuxInjector


def build_injector(
    spec: InjectorSpec,
    callbacks: Mapping[str, Callable[..., object]] | None = None,
    *,
    metrics: InjectMetrics | None = None,
) -> Injector:
    """The injector ``spec`` describes; wrapped in :class:`MeteredInjector` when ``metrics``.

    A ``callback`` spec names a callable in ``callbacks`` (registered in code); a missing one is
    ``CONFIG_UNKNOWN_CALLBACK``, so a typo fails at start-up, not at the first brief.
    """
    injector: Injector
    if spec.type == "callback":
        fn = (callbacks or {}).get(spec.callback or "")
        if fn is None:
            known = ", ".join(sorted(callbacks or {})) or "none"
            raise ConfigError(
                f"injector callback {spec.callback!r} is not registered (registered: {known})",
                reason=Config.CONFIG_UNKNOWN_CALLBACK,
                context={"key": "callback", "value": spec.callback},
            )
        injector = CallbackInjector(fn)
    elif spec.type == "command" and spec.mode == "long-lived":
        injector = LongLivedCommandInjector(spec.command, spec.timeout_s)
    elif spec.type == "command":
        injector = CommandInjector(spec.command, spec.timeout_s)
    else:
        assert spec.pane is not None  # InjectorSpec guarantees a pane for type tmux
        injector = TmuxInjector(
            spec.pane, spec.idle_pattern, socket=spec.socket, timeout_s=spec.timeout_s
        )
    if metrics is not None:
        return MeteredInjector(injector, metrics, injector=spec.type)
    return injector
