"""The ``Injector`` port: how the gateway hands a brief to a local worker.

R-ACK-6: keystrokes never traverse the broker -- injection is a *local* write by
the worker's own gateway. The forward path is at-most-once: the gateway commits the offset before
it calls :meth:`Injector.inject`, so an injector must never retry on its own after anything may
have reached the target.
"""

from __future__ import annotations

from typing import Final, Protocol

from pipeline.errors import InjectError
from pipeline.reasons import Inject

TARGET_BUSY: Final = Inject.TARGET_BUSY  # nothing was sent; retriable
INJECT_FAILED: Final = Inject.INJECT_FAILED  # target missing, command failed, callback raised
INJECT_TIMEOUT: Final = Inject.INJECT_TIMEOUT  # gave up waiting; the target may hold part of it
INJECT_BODY_INVALID: Final = Inject.INJECT_BODY_INVALID  # the body cannot be delivered as-is
INJECT_REASONS: Final = tuple(Inject)


class InjectUncertainError(InjectError):
    """The target was handed the whole brief and then went away without saying what it did
    (a long-lived child died or broke the protocol mid-brief): it *may* have been injected.

    Final, never retried (R-ACK-6); the gateway reports it to the sender as ``INJECTED`` with
    stage ``uncertain``, exactly like a crash mid-inject (``docs/injectors.md``).
    """


class Injector(Protocol):
    """Delivers one brief into one local entity, or raises :class:`~pipeline.errors.InjectError`.

    Returning normally means the brief landed: the gateway then publishes ``INJECTED(msgId)``.
    ``InjectError.retriable`` is ``True`` only with reason ``TARGET_BUSY``, when nothing reached
    the target. Implementations are safe to call from several threads (one call per target at
    a time is the gateway's job).
    """

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None: ...
