"""The loop's side of quarantine: is a key held, its state re-read at assignment, releases.

A record of a quarantined key is parked, never handled (``settle.py``). The state is re-read
at every assignment; while it cannot be read every partition is held, since a record of a key
the previous owner quarantined must not be handled meanwhile. A release is executed by the
member that owns the key's partitions: the parked records go through the one batch path again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from confluent_kafka import TopicPartition
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError
from pipeline.record import Record
from pipeline.store import with_retry
from pipeline.store.retry import StoreRetry

from .config import RuntimeConfig
from .lanes import TP
from .ports import QuarantinePort

# A store blip is absorbed inline; a longer outage backs the batch off without blocking poll.
_READ_RETRY = StoreRetry(initial_s=0.05, max_s=0.5, budget_s=2.0)


class Processes(Protocol):
    """The loop's one batch path (``ConsumerRuntime.process``)."""

    def __call__(self, records: list[Record], *, releasing: str | None = None) -> None: ...


class QuarantineGate:
    """Quarantine state as the loop reads it; ``stale`` while a refresh keeps failing."""

    def __init__(
        self,
        quarantine: QuarantinePort | None,
        config: RuntimeConfig,
        *,
        store_failed: Callable[[str, Exception], None],
    ) -> None:
        self.quarantine = quarantine
        self.config = config
        self._store_failed = store_failed
        self.stale = False  # a refresh failed: hold every partition until one works
        self._next_release_check = 0.0

    def is_quarantined(self, scope: str, key: str) -> bool:
        q = self.quarantine
        assert q is not None
        return with_retry(
            lambda: q.is_quarantined(scope, key), what="quarantine read", policy=_READ_RETRY
        )

    def refresh(self, consumer: Any, assigned: AbstractSet[TP], paused: Collection[TP]) -> bool:
        """Re-read quarantine state; on a store error hold every partition until it works
        (a record of a key quarantined by the previous owner must not be handled meanwhile).
        ``paused``: the partitions paused for a retry, which stay paused."""
        if self.quarantine is None:
            return True
        try:
            self.quarantine.refresh(self.config.dedupe_scope)
        except (SQLAlchemyError, StoreError) as exc:
            self._store_failed("quarantine refresh", exc)
            self.stale = True
            _pause_all(consumer, assigned)  # again: an assignment may have added partitions
            return False
        if self.stale:
            self.stale = False
            held = [TopicPartition(t, p) for t, p in assigned if (t, p) not in paused]
            with contextlib.suppress(Exception):  # a revoked partition: nothing to resume
                consumer.resume(held)
        return True

    # -- quarantine release: executed here, by the owner of the key's partition --------------
    def maybe_release(self, assigned: AbstractSet[TP], process: Processes) -> None:
        q = self.quarantine
        if q is None:
            return
        now = time.monotonic()
        if now < self._next_release_check:
            return
        self._next_release_check = now + self.config.release_check_s
        try:
            for key in q.pending_releases(self.config.dedupe_scope):
                records = list(q.take_for_release(self.config.dedupe_scope, key))
                if all(r.tp in assigned for r in records):
                    process(records, releasing=key)
        except (SQLAlchemyError, StoreError) as exc:  # a read: the next check retries
            self._store_failed("a release check", exc)


def _pause_all(consumer: Any, assigned: AbstractSet[TP]) -> None:
    with contextlib.suppress(Exception):
        consumer.pause([TopicPartition(t, p) for t, p in assigned])
