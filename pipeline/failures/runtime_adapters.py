"""Adapters from the consumer runtime's ports (``pipeline.runtime.ports``) to these components.

The broker adapter for library users (the gateway stages dead letters in its outbox instead):
``FailurePorts`` is the runtime's ``DeadLetterSink``: ``stage`` writes the dead letter to the
DLQ and BLOCKS until the broker confirmed it (so the batch transaction and the offset commit
that follow can never move past an unconfirmed dead letter). If the batch transaction then fails,
the batch is re-read and the record dead-lettered again: a duplicate dead letter with the same
msgId, which the reporter and replays dedupe on.

``StoreQuarantine`` is the runtime's ``QuarantinePort`` over :class:`QuarantineStore`. The
runtime's scope is a string covering all of its topics, so it maps to ``Scope(scope, "*")``.
Because the port's ``quarantine`` call carries no record, the two adapters share one object:
the dead-letter sink remembers the record and its DLQ ref by original position, and the
quarantine call (same batch, moments later) picks them up, so a release can replay the dead
letter first without reading the DLQ.

The runtime must call :meth:`StoreQuarantine.refresh` when partitions are assigned (see
``docs/failures.md``, "Wiring").
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence

from sqlalchemy.orm import Session

from pipeline.failures.dlq import DeadLetterWriter
from pipeline.failures.metrics import FailureMetrics
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.record import Record
from pipeline.runtime.context import FailureContext
from pipeline.runtime.staging import Staged

log = logging.getLogger(__name__)

ALL_TOPICS = "*"
_REMEMBER = 10_000  # dead letters remembered for a following quarantine call (one batch's worth)


class FailurePorts:
    """Both runtime ports over one DLQ writer and one quarantine store (see module doc)."""

    def __init__(
        self,
        *,
        writer: DeadLetterWriter,
        store: QuarantineStore,
        metrics: FailureMetrics | None = None,
    ) -> None:
        self.writer = writer
        self.store = store
        self.metrics = metrics
        self._recent: OrderedDict[str, tuple[Record, str]] = OrderedDict()

    # -- DeadLetterSink ------------------------------------------------------------------------
    def stage(self, tx: Staged, failure: FailureContext) -> None:
        record = failure.record
        partition, offset = self.writer.send(failure)
        self._recent[record.ref] = (record, f"{self.writer.topic}:{partition}:{offset}")
        while len(self._recent) > _REMEMBER:
            self._recent.popitem(last=False)
        if self.metrics is not None:
            self.metrics.dead_lettered(failure.reason)

    # -- QuarantinePort ------------------------------------------------------------------------
    @staticmethod
    def scope(scope: str) -> Scope:
        return Scope(scope, ALL_TOPICS)

    def refresh(self, scope: str) -> None:
        """Call on partition assignment: see what the partitions' previous owner wrote."""
        self.store.refresh(self.scope(scope))

    def is_quarantined(self, scope: str, key: str) -> bool:
        return self.store.is_quarantined(self.scope(scope), key)

    def quarantine(self, session: Session, scope: str, key: str, reason: str, ref: str) -> None:
        found = self._recent.pop(ref, None)
        if found is None:  # not dead-lettered through us: keep going, release replays parked only
            log.warning("quarantine of %r without its dead letter (%s)", key, ref)
        record, dlq_ref = found if found is not None else (None, ref)
        self.store.quarantine(
            session, self.scope(scope), key, reason=reason, dead_letter_ref=dlq_ref, record=record
        )

    def park(self, session: Session, scope: str, key: str, record: Record) -> None:
        self.store.park(session, self.scope(scope), key, record)

    def pending_releases(self, scope: str) -> Sequence[str]:
        return [r.key for r in self.store.pending_releases(self.scope(scope))]

    def take_for_release(self, scope: str, key: str) -> Sequence[Record]:
        return [p.record for p in self.store.take_for_release(self.scope(scope), key)]

    def complete_release(self, session: Session, scope: str, key: str) -> None:
        self.store.complete_release(session, self.scope(scope), key)
        if self.metrics is not None:
            self.metrics.released(ok=True)
