"""What :meth:`IdempotencyStore.reserve` answers: a closed type, one case per outcome R-EFF-2 names.

``FirstUse`` -- go ahead: a unique row now exists in the caller's transaction, state in progress.
``Done`` -- the stored result of the first request (a stored failure too): return it, act no more.
``InProgress`` -- the first request is still running (HTTP 409); try again later.
``Mismatch`` -- the key was used with a different payload (HTTP 422); never act.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredError:
    """A failure stored against a key: returned on every retry instead of trying again."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstUse:
    """Go ahead. ``attempt`` > 1 when an expired key or a dead holder's lease was taken over."""

    key: str
    attempt: int = 1
    restarted: bool = False  # True: the key had expired (a new request) or its lease ran out


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """The first request's outcome: ``value`` on success, ``error`` on a stored failure."""

    key: str
    value: Any = None
    error: StoredError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True, kw_only=True)
class InProgress:
    key: str
    since_ms: int
    lease_until_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    key: str
    stored_hash: str
    payload_hash: str


Reservation = FirstUse | Done | InProgress | Mismatch
