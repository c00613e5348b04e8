"""The pool's handler: the slow half (``run``) on a worker thread, the fast half (``handle``) in
the runtime's one ``process()`` path.

``run`` (seed 001: "dedupe before the model call"): an event whose dedupe row exists is not run
at all (the runtime drops it as a duplicate); an event with a stored result reuses it (counted,
no step); else the step runs and its result is stored at once in its own transaction.
``handle`` then stages the effect row; the runtime adds the dedupe row in the same transaction
and commits the offset after it (commit after processing).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from pipeline.failures.outcomes import Ack, Outcome
from pipeline.record import Record
from pipeline.runtime.dedupe import seen_ids
from pipeline.runtime.staging import Staged

from .metrics import PoolMetrics
from .results import effects_table, store_result, stored_result
from .steps import StepFn

log = logging.getLogger(__name__)

Ref = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class StepResult:
    started_ms: int
    ended_ms: int
    result: str | None = None  # None with error=None: already applied (the runtime drops it)
    reused: bool = False
    error: BaseException | None = None


def encode_result(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, sort_keys=True)


def event_id(record: Record, header: str) -> str:
    """The event id: the ``msgId`` header (``fleet pool submit`` always sets one), else the
    record's position, which is stable across redeliveries of that record."""
    return record.header_str(header) or record.ref


class PoolHandler:
    """``StepRunner`` + runtime ``Handler`` for one pool member (see the module docstring)."""

    def __init__(
        self,
        step: StepFn,
        *,
        scope: str,
        member: str,
        sessions: sessionmaker[Session],
        reads: sessionmaker[Session],
        dedupe_header: str | None = "msgId",
        metrics: PoolMetrics | None = None,
        events_path: str | None = None,
    ) -> None:
        self.step = step
        self.scope = scope
        self.member = member
        self.sessions = sessions
        self.reads = reads
        self.dedupe_header = dedupe_header
        self.metrics = metrics
        self.events_path = events_path
        self._lock = threading.Lock()
        self._results: dict[Ref, StepResult] = {}

    # -- worker thread ---------------------------------------------------------------------------
    def run(self, record: Record) -> None:
        started = _now_ms()
        outcome = self._run(record, started)
        with self._lock:
            self._results[(record.topic, record.partition, record.offset)] = outcome
        self._log_event(record, outcome)

    def _run(self, record: Record, started: int) -> StepResult:
        eid = event_id(record, self.dedupe_header or "msgId")
        if self.dedupe_header is not None:
            with self.reads() as session:
                if seen_ids(session, self.scope, [eid]):
                    return StepResult(started, _now_ms())
                prior = stored_result(session, self.scope, eid)
            if prior is not None:
                if self.metrics:
                    self.metrics.reused.labels(self.metrics.pool).inc()
                return StepResult(started, _now_ms(), result=prior, reused=True)
        t0 = time.monotonic()
        try:
            value = encode_result(self.step(record))
        except Exception as exc:  # noqa: BLE001 - the runtime's failure decision classifies it
            self._observe(t0, "error")
            return StepResult(started, _now_ms(), error=exc)
        self._observe(t0, "ok")
        ended = _now_ms()
        if self.dedupe_header is not None:
            value = store_result(
                self.sessions,
                scope=self.scope,
                event_id=eid,
                result=value,
                member=self.member,
                now_ms=ended,
            )
        return StepResult(started, ended, result=value)

    def _observe(self, t0: float, result: str) -> None:
        if self.metrics:
            self.metrics.step_seconds.labels(self.metrics.pool, result).observe(
                time.monotonic() - t0
            )

    def _log_event(self, record: Record, r: StepResult) -> None:
        if not self.events_path:
            return
        kind = (
            "error"
            if r.error is not None
            else "duplicate"
            if r.result is None
            else "reused"
            if r.reused
            else "ran"
        )
        line = {
            "event_id": event_id(record, self.dedupe_header or "msgId"),
            "member": self.member,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key_str,
            "start_ms": r.started_ms,
            "end_ms": r.ended_ms,
            "kind": kind,
        }
        with self._lock, open(self.events_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    # -- poll thread -------------------------------------------------------------------------------
    def verify(self, record: Record) -> None:
        """Called by the runtime instead of ``handle`` for an already-applied event: forget its
        step entry (the runtime drops the record as a duplicate)."""
        with self._lock:
            self._results.pop((record.topic, record.partition, record.offset), None)

    def handle(self, record: Record, tx: Staged) -> Outcome:
        with self._lock:
            r = self._results.pop((record.topic, record.partition, record.offset), None)
        if r is None:  # cannot happen through the dispatcher; run it here rather than drop it
            self.run(record)
            with self._lock:
                r = self._results.pop((record.topic, record.partition, record.offset))
        if r.error is not None:
            raise r.error
        tx.insert(
            effects_table,
            {
                "scope": self.scope,
                "event_id": event_id(record, self.dedupe_header or "msgId"),
                "partition": record.partition,
                "offset": record.offset,
                "key": record.key_str,
                "member": self.member,
                "started_ms": r.started_ms,
                "ended_ms": r.ended_ms,
                "reused": r.reused,
                "result": r.result or "",
            },
        )
        return Ack()


def _now_ms() -> int:
    return int(time.time() * 1000)
