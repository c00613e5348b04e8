"""Retry policy and failure classification (R-RETRY-1: classify failures first; R-FAIL-3).

A transient failure (timeout, rate limit, broker or store briefly away) is retried with
exponential backoff and jitter, a bounded number of times. A permanent failure (bad signature,
bad schema, wrong ``to``, expired, ...) never succeeds on a retry, so it skips the budget and goes
straight to the dead-letter topic. :func:`pipeline.runtime.decide.decide` is the one place that turns what a
handler said plus the attempt count into what the runtime does next.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline import reasons
from pipeline.support.retrying import Backoff

# Envelope verification failures: the record is not a legitimate member of its key's ordered
# stream (anyone with write access could have produced it, and the key is attacker-controlled),
# so it is dead-lettered but never quarantines the key -- a forged record must not stall a real
# recipient.
VERIFICATION_REASONS: frozenset[str] = frozenset(reasons.Verification)

# Permanent: retrying cannot help (derived in the registry).
PERMANENT_REASONS: frozenset[str] = reasons.PERMANENT

# Authenticity failures (derived in the registry from the verifier's order): the record's `from`
# may be forged, so the FAILED reporter must never answer it. Narrower than VERIFICATION_REASONS:
# EXPIRED, TO_MISMATCH or TTL_TOO_LONG come after a valid signature, so such a dead letter is
# authentic and its sender does get a FAILED (R-DLQ-4).
AUTHENTICITY_FAILURES: frozenset[str] = reasons.AUTHENTICITY


def is_permanent(reason: str) -> bool:
    return reason in PERMANENT_REASONS


def is_verification_failure(reason: str) -> bool:
    return reason in VERIFICATION_REASONS


@dataclass(frozen=True, kw_only=True)
class BackoffPolicy:
    """Exponential backoff with jitter and a bounded number of attempts (R-RETRY-1).

    The waits follow the fleet's one backoff rule (:class:`pipeline.support.retrying.Backoff`):
    ``min(max_s, base_s * factor ** (attempt - 1))`` +/- ``jitter``, never above ``max_s``.

    ``attempt`` is 1-based: the number of attempts made so far, including the one that just
    failed. ``delay_for(1)`` is the wait before the second attempt.
    """

    base_s: float = 0.2
    factor: float = 2.0
    max_s: float = 30.0
    max_attempts: int = 5
    jitter: float = 0.2  # +/- fraction of the delay, so retries of many records do not align

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.factor < 1 or self.max_s < self.base_s:
            raise ValueError("BackoffPolicy needs base_s >= 0, factor >= 1, max_s >= base_s")
        if self.max_attempts < 1 or not 0 <= self.jitter < 1:
            raise ValueError("BackoffPolicy needs max_attempts >= 1 and 0 <= jitter < 1")

    @property
    def backoff(self) -> Backoff:
        """This schedule as the fleet's one backoff rule (:mod:`pipeline.support.retrying`)."""
        return Backoff(
            initial_s=self.base_s, max_s=self.max_s, multiplier=self.factor, jitter=self.jitter
        )

    def delay_for(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after ``attempt`` failed attempts; never above ``max_s``."""
        return self.backoff.delay(attempt, rng=rng)

    def exhausted(self, attempt: int) -> bool:
        """True once ``attempt`` attempts have been made and no retry is left."""
        return attempt >= self.max_attempts

    def worst_case_stall_s(self) -> float:
        """The longest a record can hold its key (sum of all waits): size poll intervals on it."""
        backoff = self.backoff
        return sum(backoff.nominal(a) * (1 + self.jitter) for a in range(1, self.max_attempts))
