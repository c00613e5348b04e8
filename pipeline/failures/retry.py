"""Retry policy and failure classification (seed 001 "classify failures first", scenario 3).

A transient failure (timeout, rate limit, broker or store briefly away) is retried with
exponential backoff and jitter, a bounded number of times. A permanent failure (bad signature,
bad schema, wrong ``to``, expired, ...) never succeeds on a retry, so it skips the budget and goes
straight to the dead-letter topic. :func:`resolve` is the one place that turns what a handler
said (an :data:`~pipeline.failures.outcomes.Outcome`) plus the attempt count into what the
runtime does next.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.envelope import reasons as envelope_reasons
from pipeline.errors import FleetError

from .outcomes import RETRIES_EXHAUSTED, DeadLetter, Outcome, Quarantine, Retry

# Envelope verification failures: the record is not a legitimate member of its key's ordered
# stream (anyone with write access could have produced it), so it is dead-lettered but never
# quarantines the key -- a forged record must not be able to stall a real recipient.
VERIFICATION_REASONS: frozenset[str] = frozenset(envelope_reasons.ALL_REASONS)

# Permanent: retrying cannot help. Verification failures plus handler-level permanent codes.
PERMANENT_REASONS: frozenset[str] = VERIFICATION_REASONS | frozenset(
    {"UNKNOWN_RECIPIENT", "CONFIG_INVALID", "INVALID_NAME", "VALIDATION_FAILED", "HANDLER_REJECTED"}
)


# Authenticity failures: the signature or the sender could not be established, so the record's
# `from` may be forged and the FAILED reporter must never answer it. A narrower question than
# VERIFICATION_REASONS above: EXPIRED, TO_MISMATCH or TTL_TOO_LONG come after a valid signature,
# so such a dead letter is authentic and its sender does get a FAILED (seed 000 §10.1).
AUTHENTICITY_FAILURES: frozenset[str] = frozenset(
    {
        "NOT_SIGNED",
        "SIG_INVALID",
        "UNKNOWN_KEY",
        "SIGNER_MISMATCH",
        "MALFORMED_HEADERS",
        "TOO_LARGE",
        "UNKNOWN_KIND",
        "UNSUPPORTED_VERSION",
        "UNKNOWN_SENDER",
    }
)


def is_permanent(reason: str) -> bool:
    return reason in PERMANENT_REASONS


def is_verification_failure(reason: str) -> bool:
    return reason in VERIFICATION_REASONS


@dataclass(frozen=True, kw_only=True)
class BackoffPolicy:
    """Exponential backoff with jitter and a bounded number of attempts (seed 001 scenario 3).

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

    def delay_for(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after ``attempt`` failed attempts; never above ``max_s``."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        # cap the exponent first so a large attempt count cannot overflow a float
        raw = self.base_s * self.factor ** min(attempt - 1, 64)
        delay = min(self.max_s, raw)
        if self.jitter:
            spread = (rng or random).uniform(-self.jitter, self.jitter)
            delay = delay * (1 + spread)
        return max(0.0, min(self.max_s, delay))

    def exhausted(self, attempt: int) -> bool:
        """True once ``attempt`` attempts have been made and no retry is left."""
        return attempt >= self.max_attempts

    def worst_case_stall_s(self) -> float:
        """The longest a record can hold its key (sum of all waits): size poll intervals on it."""
        return sum(
            min(self.max_s, self.base_s * self.factor ** (a - 1)) * (1 + self.jitter)
            for a in range(1, self.max_attempts)
        )


def classify(exc: BaseException, *, ordered: bool = False) -> Outcome:
    """Map an exception onto an outcome; a permanent reason wins over a ``retriable`` flag.

    In an ordered flow a permanent handler failure quarantines the key (later records of it must
    not overtake it); a verification failure never does (see :data:`VERIFICATION_REASONS`).
    """
    if isinstance(exc, FleetError):
        if is_permanent(exc.reason) or not exc.retriable:
            if ordered and not is_verification_failure(exc.reason):
                return Quarantine(reason=exc.reason, error=str(exc))
            return DeadLetter(reason=exc.reason, error=str(exc))
        return Retry(error=str(exc))
    return Retry(error=f"{type(exc).__name__}: {exc}")


def resolve(outcome: Outcome, *, attempt: int, policy: BackoffPolicy, ordered: bool) -> Outcome:
    """What the runtime does after ``attempt`` attempts ended in ``outcome``.

    * ``Retry`` with budget left -> ``Retry`` with a concrete delay (the policy's unless given).
    * ``Retry`` with the budget spent -> ``Quarantine(RETRIES_EXHAUSTED)`` in an ordered flow
      (later records of the key must wait), else ``DeadLetter(RETRIES_EXHAUSTED)``.
    * ``DeadLetter`` unchanged: the handler chose not to hold the key back.
    * ``Quarantine`` in an unordered flow, or for a verification failure -> ``DeadLetter``
      (no order to keep / a forged record must not stall the key).
    * ``Ack`` unchanged.
    """
    if isinstance(outcome, Retry):
        if policy.exhausted(attempt):
            if ordered:
                return Quarantine(reason=RETRIES_EXHAUSTED, error=outcome.error)
            return DeadLetter(reason=RETRIES_EXHAUSTED, error=outcome.error)
        delay = policy.delay_for(attempt) if outcome.delay_s is None else outcome.delay_s
        return Retry(delay_s=delay, error=outcome.error)
    if isinstance(outcome, Quarantine):
        if not ordered or is_verification_failure(outcome.reason):
            return DeadLetter(reason=outcome.reason, error=outcome.error)
        return outcome
    return outcome
