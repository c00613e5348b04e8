"""Retry one call with backoff: the one backoff rule and the one retry loop of the fleet.

Every "try it again in a moment" in ``pipeline/`` waits by :class:`Backoff`. After ``n`` failed
attempts (``n`` counts from 1) the wait is::

    nominal(n) = min(max_s, initial_s * multiplier ** (n - 1))
    delay(n)   = nominal(n) * (1 + U(-jitter, +jitter)), clamped to [0, max_s]

so ``jitter`` is a +/- fraction of the nominal delay ("proportional jitter"), and ``jitter=0`` is
the plain capped exponential schedule. Proportional jitter rather than full jitter
(``U(0, nominal)``) or equal jitter (``nominal/2 + U(0, nominal/2)``) because the runtime's
message retry schedule is public in that form (:class:`pipeline.runtime.retry.BackoffPolicy`,
docs/failures.md: "``base_s·factor^(attempt-1)`` ± jitter, never above ``max_s``") and because it
keeps each wait near its nominal value, which is what the documented bounds (docs/store.md 50 ms
doubling to 2 s, docs/presence.md 0.1 s doubling to 5 s) promise; a jitter spreads the retries
of many callers so they do not arrive together.

:func:`retry_call` runs one call until it returns, waiting :meth:`Backoff.delay` between
attempts. It retries only what ``retriable`` accepts, and gives up -- re-raising the last error
unchanged, so the caller decides what to say -- when ``attempts`` are spent, when the next wait
would end past ``deadline_s``, or when ``wait`` reports a stop (``threading.Event.wait`` returns
True once its event is set)::

    retry_call(fn, retriable=..., backoff=Backoff(initial_s=0.1, max_s=5.0), deadline_s=30)
    ├── fn() returns            -> its value
    ├── not retriable(error)    -> the error, at once
    ├── attempts spent          -> the last error
    ├── next wait past deadline -> the last error
    └── wait(delay) is truthy   -> the last error (a stop)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """The one backoff rule (see the module docstring): capped exponential, +/- ``jitter``."""

    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter: float = 0.0  # +/- fraction of the nominal delay, so many retries do not align

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.max_s < 0 or self.multiplier < 1:
            raise ValueError("Backoff needs initial_s >= 0, max_s >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("Backoff needs 0 <= jitter < 1")

    def nominal(self, attempt: int) -> float:
        """The wait after ``attempt`` failed attempts, before jitter."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        # cap the exponent first so a large attempt count cannot overflow a float
        return min(self.max_s, self.initial_s * self.multiplier ** min(attempt - 1, 64))

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after ``attempt`` failed attempts; never below 0 nor above ``max_s``."""
        delay = self.nominal(attempt)
        if self.jitter:
            delay *= 1 + (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, min(self.max_s, delay))


def retry_call(
    fn: Callable[[], T],
    *,
    retriable: Callable[[Exception], bool],
    backoff: Backoff,
    deadline_s: float | None = None,
    attempts: int | None = None,
    wait: Callable[[float], object] = time.sleep,
    on_retry: Callable[[Exception, int, float], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``fn()``, tried again after :meth:`Backoff.delay` while it raises a retriable error.

    ``on_retry(error, attempt, delay)`` is called before each wait (``attempt`` failed attempts
    so far). The deadline counts the larger of the time passed on ``clock`` and the waits asked
    for, so an injected ``wait`` that returns at once still ends. See the module docstring for
    when it gives up; giving up re-raises the last error.
    """
    if attempts is not None and attempts < 1:
        raise ValueError("attempts must be >= 1")
    start = clock()
    waited = 0.0
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not retriable(exc) or (attempts is not None and attempt >= attempts):
                raise
            delay = backoff.delay(attempt, rng=rng)
            if deadline_s is not None and max(clock() - start, waited) + delay > deadline_s:
                raise
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            if wait(delay):
                raise
            waited += delay
