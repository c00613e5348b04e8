"""What the runtime needs from the outside, as small Protocols (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sqlalchemy.orm import Session

from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.runtime.outcomes import DeadLetter, Outcome

from .batch_session import InTransaction
from .staging import Staged


class Handler(Protocol):
    """Handles one record: stages its writes on ``tx`` and returns an outcome.

    Runs inside the poll loop: keep it fast; anything slow or that must follow the offset
    commit goes into ``tx.after_commit``.
    """

    def handle(self, record: Record, tx: Staged) -> Outcome: ...


@runtime_checkable
class Verifies(Protocol):
    """A handler with a verify stage (the gateway's inbox: R-ENV-3).

    The runtime calls ``verify`` for a record whose ``msgId`` was already applied, instead of
    ``handle``: ``None`` means it verifies, so it is dropped as a duplicate and counted; a
    ``DeadLetter`` (its verification reason) is dead-lettered. A handler without this stage
    trusts its records, and a duplicate of an applied ``msgId`` is dropped unseen. ``handle``
    still verifies every other record itself (verification runs once per record either way).
    """

    def verify(self, record: Record) -> DeadLetter | None: ...


@runtime_checkable
class Prepares(Protocol):
    """A handler with a batch stage, run on the whole batch before its transaction opens.

    The gateway's inbox verifies every signature of the batch here, across a small thread pool
    (Ed25519 verify releases the GIL), and ``handle``/``verify`` then use the stored result in
    partition order: per-record outcomes and their order are unchanged, only the CPU work moved
    off the consume thread. ``prepare`` must not raise; it must not write to the store.
    """

    def prepare(self, records: Sequence[Record]) -> None: ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A handler with a batch read, run inside the batch transaction before its records are
    decided: what each record's decision reads from the store, taken for the whole batch in one
    statement instead of one read per record (the gateway reads the tracked send of every
    receipt in the batch). It reads in the transaction the batch writes in, so it sees the
    store as the writes will. It runs before the dedupe claim and must not depend on it: on
    PostgreSQL its read may go in the claim's round trip (``pg_pipeline.lead``).
    ``read_ahead`` must not write; a record it did not cover is read by ``handle`` itself, as
    without this stage.
    """

    def read_ahead(self, tx: InTransaction, records: Sequence[Record]) -> None: ...


WARM_UP_ID = "warm-up (rolled back)"
"""The msgId the warm-up stages its rows under: no envelope's (msgIds are UUIDs), and plain text
that every store's text columns take (PostgreSQL's refuse a NUL byte)."""


@runtime_checkable
class Warms(Protocol):
    """A handler that can stage its usual writes once before the first batch.

    ``warm(session)`` runs inside a transaction the runtime always rolls back: it pays the first
    use of the handler's statements (SQLAlchemy compiles and caches them on first execution) at
    start instead of inside the first batch (measured: a 130-340 ms first-batch stall). Its rows
    take the msgId :data:`WARM_UP_ID`.
    """

    def warm(self, session: Session) -> None: ...


class DeadLetterSink(Protocol):
    """The dead-letter port: ``stage`` is called inside the batch, before its transaction.

    Adapters: ``pipeline.gateway.dead_letter_outbox.OutboxDeadLetterSink`` stages an outbox row for the
    DLQ in the batch transaction (the gateway); ``pipeline.failures.runtime_adapters.FailurePorts``
    writes to the DLQ topic and blocks on the broker's ack (library users without an outbox).
    Either way the offset moves past the record only once its dead letter is durable.
    """

    def stage(self, tx: Staged, failure: FailureContext) -> None: ...


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
