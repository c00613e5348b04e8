"""What the runtime needs from the outside, as small Protocols (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy.orm import Session

from pipeline.failures.outcomes import Outcome

from .record import Record
from .staging import Staged


class Handler(Protocol):
    """Handles one record: stages its writes on ``tx`` and returns an outcome.

    Runs inside the poll loop: keep it fast; anything slow or that must follow the offset
    commit goes into ``tx.after_commit``.
    """

    def handle(self, record: Record, tx: Staged) -> Outcome: ...


class DeadLetterSink(Protocol):
    """Stages a dead letter in the batch transaction (e.g. an outbox row for ``fleet.dlq``)."""

    def stage(
        self,
        tx: Staged,
        record: Record,
        *,
        reason: str,
        error: str,
        attempts: int,
        first_failure_ms: int,
        last_failure_ms: int,
    ) -> None: ...


class QuarantinePort(Protocol):
    """Per-key quarantine state shared by every consumer of a group (survives rebalances)."""

    def is_quarantined(self, scope: str, key: str) -> bool: ...

    def refresh(self, scope: str) -> object:
        """Re-read quarantine state (called on every assignment: a partition that moved here
        may carry keys another member quarantined)."""
        ...

    def quarantine(self, session: Session, scope: str, key: str, reason: str, ref: str) -> None: ...

    def park(self, session: Session, scope: str, key: str, record: Record) -> None: ...

    def pending_releases(self, scope: str) -> Sequence[str]: ...

    def take_for_release(self, scope: str, key: str) -> Sequence[Record]: ...

    def complete_release(self, session: Session, scope: str, key: str) -> None: ...
