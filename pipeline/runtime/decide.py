"""The one failure decision: what the runtime does after an attempt (R-FAIL-3).

Pure functions, no I/O: :func:`classify` maps an exception a handler raised onto an outcome, and
:func:`decide` maps ``(outcome, attempt, policy, ordered, keyed)`` onto what happens next. The
consumer runtime calls both for every record; nothing else decides. The table, also in
``docs/failures.md``:

========================  ============  =======================  ===============================
handler said              budget left   ordered flow, keyed      result
========================  ============  =======================  ===============================
``Retry``                 yes           any                      ``Retry(delay)`` (policy delay
                                                                 unless the handler gave one)
``Retry``                 spent         yes                      ``Quarantine(RETRIES_EXHAUSTED)``
``Retry``                 spent         no                       ``DeadLetter(RETRIES_EXHAUSTED)``
``DeadLetter(r)``         --            any                      unchanged (the handler chose not
                                                                 to hold the key)
``Quarantine(r)``         --            yes, ``r`` verified      unchanged
``Quarantine(r)``         --            no, or ``r`` is a        ``DeadLetter(r)``
                                        verification failure
========================  ============  =======================  ===============================

A verification failure never quarantines a key: the key of a record that did not verify is
attacker-controlled, and a forged record must not be able to stall a real recipient.
"""

from __future__ import annotations

from pipeline.errors import FleetError
from pipeline.runtime.outcomes import RETRIES_EXHAUSTED, Ack, DeadLetter, Outcome, Quarantine, Retry
from pipeline.runtime.retry import BackoffPolicy, is_permanent, is_verification_failure


def classify(exc: BaseException) -> Outcome:
    """Map an exception onto an outcome; a permanent reason wins over a ``retriable`` flag.

    A permanent ``FleetError`` is a ``Quarantine`` with its reason (:func:`decide` turns it into
    a ``DeadLetter`` in an unordered flow, for a keyless record or a verification failure); a
    retriable one, or any unexpected exception, is a ``Retry``.
    """
    if isinstance(exc, FleetError):
        if is_permanent(exc.reason) or not exc.retriable:
            return Quarantine(reason=exc.reason, error=str(exc))
        return Retry(error=str(exc))
    return Retry(error=f"{type(exc).__name__}: {exc}")


def decide(
    outcome: Outcome, *, attempt: int, policy: BackoffPolicy, ordered: bool, keyed: bool = True
) -> Outcome:
    """What the runtime does after ``attempt`` attempts (1-based) ended in ``outcome``.

    The result is final except a ``Retry``, which always carries a concrete ``delay_s``.
    """
    if isinstance(outcome, Ack):
        return outcome
    holds_order = ordered and keyed
    if isinstance(outcome, Retry):
        if policy.exhausted(attempt):
            error = f"{RETRIES_EXHAUSTED} after {attempt} attempts: {outcome.error}"
            if holds_order:
                return Quarantine(reason=RETRIES_EXHAUSTED, error=error)
            return DeadLetter(reason=RETRIES_EXHAUSTED, error=error)
        delay = policy.delay_for(attempt) if outcome.delay_s is None else outcome.delay_s
        return Retry(delay_s=delay, error=outcome.error)
    if isinstance(outcome, Quarantine):
        if not holds_order or is_verification_failure(outcome.reason):
            return DeadLetter(reason=outcome.reason, error=outcome.error)
        return outcome
    if isinstance(outcome, DeadLetter):
        return outcome
    raise TypeError(f"not an outcome: {outcome!r}")  # the type is closed
