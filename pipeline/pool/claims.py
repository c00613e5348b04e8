"""A pool step's idempotency key, reserved through :mod:`pipeline.effects`.

One path per concern: a step's stored outcome lives in ``fleet_idempotency`` under key class
``pool.<name>``, keyed by the event id (``msgId``), like every other effect that happens once.
A step is an external effect (a model call taking seconds to minutes), so it uses the store's
"reserve, commit, act, complete" mode:

1. ``claim`` reserves the key in its own short transaction, which first asks ``applied`` (the
   runtime's dedupe row, R-POOL-4: "dedupe before the model call"): an event applied already is
   :class:`Applied` and never reserved -- one transaction per claim, not a read and a write.
   ``FirstUse``: run the step.
   ``Done``: the stored outcome, replayed (no second model call). ``InProgress``: another member
   holds it (a step given up at a revoke and still running, or a member killed mid-step whose
   lease has not run out): wait, polling, until it is ``Done`` or the lease ends and this member
   takes it over (``FirstUse(restarted=True)``). Never two holders of one attempt at once.
2. While the step runs its lease is renewed by the member's heartbeat (:mod:`.heartbeat`) every
   ``lease_s / 3``; a member killed -9 stops renewing, so its key is free ``lease_s`` after the
   last renewal at most.
3. ``complete`` stores the result for the attempt this member holds, in its own transaction, as
   soon as the step ends; a holder whose lease was taken over is refused and replays the new
   holder's outcome instead. ``release`` forgets the key when the step raised: the runtime's
   failure decision (retry, quarantine, dead letter) owns failed attempts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.effects import Done, FirstUse, IdempotencyStore, Mismatch, Reservation
from pipeline.errors import StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Applied:
    """The event's dedupe row exists: its effect was applied, the step must not run."""

    key: str


AppliedCheck = Callable[[Session | Connection], bool]


@dataclass(frozen=True, slots=True)
class Held:
    key: str
    attempt: int


class StepClaims:
    """Reserve / complete / release step keys of one pool, and the keys this member holds (the
    heartbeat renews them). Thread-safe: every worker thread calls it.

    ``sessions`` begins each claim's transaction: an :class:`Engine` (what a pool member passes)
    gives a plain Core connection per transaction, no ORM session around its two statements --
    the ORM's unit of work was about half of a step's store CPU; a ``sessionmaker`` works too."""

    def __init__(
        self,
        store: IdempotencyStore,
        sessions: Engine | sessionmaker[Session],
        *,
        key_class: str,
        poll_s: float | None = None,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.key_class = key_class
        self.lease_s = store.key_class(key_class).lease_s
        self.poll_s = poll_s if poll_s is not None else min(0.5, self.lease_s / 6)
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def claim(
        self, key: str, payload: Any, *, applied: AppliedCheck | None = None
    ) -> Reservation | Applied:
        """``FirstUse`` (now held), ``Done`` or ``Mismatch``; waits out ``InProgress``. Returns
        the last ``InProgress`` only when the member is stopping. ``applied`` is asked first, in
        the same transaction (each time round while waiting): ``True`` answers :class:`Applied`."""
        while True:
            with self.sessions.begin() as session:
                if applied is not None and applied(session):
                    return Applied(key)
                answer = self.store.reserve(session, key, payload, key_class=self.key_class)
            if isinstance(answer, FirstUse):
                with self._lock:
                    self._held[key] = answer.attempt
                return answer
            if isinstance(answer, Done | Mismatch):
                return answer
            left_s = answer.lease_until_ms / 1000 - time.time()
            if self.stopping.wait(max(0.02, min(self.poll_s, left_s))):
                return answer

    def complete(self, key: str, value: str, payload: Any) -> str:
        """Store ``value`` for the attempt held and return it. Refused (the key was taken over
        after this member's lease ran out): returns the outcome that was stored instead, or
        stores ``value`` if this member gets the key back."""
        attempt = self._drop(key)
        while True:
            try:
                with self.sessions.begin() as session:
                    self.store.complete(
                        session, key, value, key_class=self.key_class, attempt=attempt
                    )
                return value
            except StoreError:
                log.warning("step key %s was taken over while its step ran", key)
            answer = self.claim(key, payload)
            if isinstance(answer, Done):
                return outcome_value(answer)
            if not isinstance(answer, FirstUse):  # stopping, or a mismatch: keep ours
                return value
            attempt = self._drop(key)

    def release(self, key: str) -> None:
        attempt = self._drop(key)
        with self.sessions.begin() as session:
            self.store.release(session, key, key_class=self.key_class, attempt=attempt)

    def held(self) -> list[Held]:
        with self._lock:
            return [Held(k, a) for k, a in self._held.items()]

    def holds(self, held: Held) -> bool:
        """Still held at that attempt (not completed or released since ``held()`` listed it)."""
        with self._lock:
            return self._held.get(held.key) == held.attempt

    def _drop(self, key: str) -> int:
        with self._lock:
            return self._held.pop(key)


def outcome_value(answer: Done) -> str:
    """A stored pool outcome as the handler's result string (pools store no failures)."""
    if answer.error is not None:
        return f"{answer.error.reason}: {answer.error.message}"
    return answer.value if isinstance(answer.value, str) else str(answer.value)
