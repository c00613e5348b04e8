"""What a dead-letter sink is told about one failed record: a frozen value, built once.

Every sink (the gateway's outbox-staged one, the broker one for library users) and the DLQ
record format (``pipeline.failures.dlq.dead_letter_headers``) take this one object instead of a
dozen loose arguments, so the context a dead letter carries cannot differ between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from pipeline.reasons import AUTHENTICITY
from pipeline.record import Record


class Tries(TypedDict):
    """How often a record was tried and when it failed first/last (the runtime's retry state)."""

    attempts: int
    first_failure_ms: int
    last_failure_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureContext:
    """One failed record and why: reason code, bounded error, attempts, failure times."""

    record: Record
    reason: str
    error: str
    attempts: int = 1
    first_failure_ms: int
    last_failure_ms: int
    quarantined: bool = False  # this dead letter quarantines its key

    @property
    def verified(self) -> bool:
        """The envelope was authentic: unless the failure is an authenticity failure the record
        passed verification (verification runs first), so the FAILED reporter may answer its
        ``from``. A forged ``from`` is never answered (R-DLQ-4)."""
        return self.reason not in AUTHENTICITY
