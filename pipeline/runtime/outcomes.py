"""Handler outcomes: a closed type. The runtime does exactly one thing per outcome.

``Ack`` -- done; the record counts as handled for the commit watermark.
``Retry(delay_s)`` -- transient failure; the partition is paused and the record retried after the
delay without blocking ``poll`` (so ``max.poll.interval.ms`` is never blown).
``DeadLetter(reason)`` -- permanent failure; the record goes to the DLQ with its context, then
counts as handled.
``Quarantine(reason)`` -- like ``DeadLetter`` and the record's key is quarantined: later records of
that key are parked in order until an operator releases it.

Reason strings are public API (dashboards, alert rules and runbooks key on them).
Exceptions map onto outcomes through :func:`pipeline.runtime.decide.classify`; what the runtime
does with an outcome is :func:`pipeline.runtime.decide.decide` (``docs/failures.md`` has the
table).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.reasons import Failure


@dataclass(frozen=True, slots=True)
class Ack:
    """Handled: the record's staged writes commit with its dedupe row."""

    pass


@dataclass(frozen=True, slots=True)
class Retry:
    """Transient failure: pause the partition, retry after ``delay_s`` (or the backoff policy)."""

    delay_s: float | None = None  # None: let the backoff policy choose
    error: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Permanent failure: to the DLQ with ``reason`` (a public reason code), then move on."""

    reason: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Dead-letter and quarantine the key: later records of it are parked in order."""

    reason: str
    error: str = ""


Outcome = Ack | Retry | DeadLetter | Quarantine

ACK = Ack()

HANDLER_ERROR = Failure.HANDLER_ERROR
RETRIES_EXHAUSTED = Failure.RETRIES_EXHAUSTED
