"""Library use: inject by calling a Python function in the gateway's process."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.errors import InjectError

from .port import INJECT_FAILED

InjectFn = Callable[..., object]
"""Called as ``fn(gid=, msg_id=, kind=, sender=, body=)``; may raise ``InjectError`` itself."""


class CallbackInjector:
    """An :class:`~pipeline.gateway.injectors.port.Injector` backed by a callable.

    Any exception other than ``InjectError`` becomes a final ``INJECT_FAILED`` (forward path,
    at-most-once: the callable may have acted before it raised, so it is never retried blindly).
    """

    def __init__(self, fn: InjectFn) -> None:
        if not callable(fn):
            raise TypeError(f"CallbackInjector needs a callable, got {fn!r}")
        self.fn = fn

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        try:
            self.fn(gid=gid, msg_id=msg_id, kind=kind, sender=sender, body=body)
        except InjectError:
            raise
        except Exception as exc:  # user code: any failure is a failed inject, never a crash
            raise InjectError(
                f"callback for {gid} raised {type(exc).__name__}: {exc}",
                reason=INJECT_FAILED,
                retriable=False,
                context={"gid": gid, "msg_id": msg_id, "injector": "callback"},
            ) from exc

    def __repr__(self) -> str:
        return f"CallbackInjector({getattr(self.fn, '__qualname__', self.fn)!r})"
