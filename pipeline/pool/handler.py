"""The pool's handler: the slow half (``run``) on a worker thread, the fast half (``handle``) in
the runtime's one ``process()`` path.

``run`` (R-POOL-4: "dedupe before the model call"): an event whose dedupe row exists is not run
at all (the runtime drops it as a duplicate); else its step key is claimed through
:mod:`pipeline.effects` (:mod:`.claims`): a stored outcome is replayed (counted, no step), a key
held by another member is waited for, a first use runs the step and stores its result at once.
``handle`` then stages the effect row; the runtime adds the dedupe row in the same transaction
and commits the offset after it (commit after processing).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from pipeline.effects import Done, FirstUse, Mismatch
from pipeline.errors import FleetError
from pipeline.reasons import Idempotency
from pipeline.record import Record
from pipeline.runtime.dedupe import is_applied
from pipeline.runtime.outcomes import Ack, Outcome
from pipeline.runtime.staging import Staged
from pipeline.support.clock import now_ms
from pipeline.tracing import POOL_STEP, TRACING

from .claims import Applied, StepClaims, outcome_value
from .metrics import PoolMetrics
from .steps import StepFn
from .tables import effects_table

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
        claims: StepClaims | None,
        dedupe_header: str | None = "msgId",
        metrics: PoolMetrics | None = None,
        events_path: str | None = None,
    ) -> None:
        self.step = step
        self.scope = scope
        self.member = member
        self.claims = claims if dedupe_header is not None else None
        self.dedupe_header = dedupe_header
        self.metrics = metrics
        self.events_path = events_path
        self._lock = threading.Lock()
        self._results: dict[Ref, StepResult] = {}
        self._running: dict[Ref, int] = {}
        self._events: TextIO | None = None

    def running_since(self) -> list[int]:
        """Start times (epoch ms) of the steps on worker threads now: the heartbeat's lanes."""
        with self._lock:
            return list(self._running.values())

    # -- worker thread ---------------------------------------------------------------------------
    def run(self, record: Record) -> None:
        started = now_ms()
        ref = (record.topic, record.partition, record.offset)
        with self._lock:
            self._running[ref] = started
        try:
            self._log_event(record, None, started)
            outcome = self._run(record, started)
        except Exception as exc:  # noqa: BLE001 - e.g. the store is down: a failed attempt
            outcome = StepResult(started, now_ms(), error=exc)
        finally:
            with self._lock:
                self._running.pop(ref, None)
        with self._lock:
            self._results[ref] = outcome
        if TRACING.on:  # fleet.pool.step, in the record's trace when it names one
            TRACING.event(POOL_STEP, trace_id=record.header_str("traceId") or "",
                          msg_id=record.header_str("msgId") or record.ref, headers=record.headers)  # fmt: skip
        self._log_event(record, outcome, started)

    def _run(self, record: Record, started: int) -> StepResult:
        eid = event_id(record, self.dedupe_header or "msgId")
        claims, payload = self.claims, record.value or b""
        if claims is not None:
            answer = claims.claim(eid, payload, applied=functools.partial(self._applied, eid))
            if isinstance(answer, Applied):
                return StepResult(started, now_ms())
            if isinstance(answer, Done):
                return self._reused(started, outcome_value(answer))
            if isinstance(answer, Mismatch):
                return StepResult(started, now_ms(), error=_mismatch(eid))
            if not isinstance(answer, FirstUse):  # the member is stopping while another holds it
                return StepResult(started, now_ms(), error=_stopping(eid))
        t0 = time.monotonic()
        try:
            value = encode_result(self.step(record))
        except Exception as exc:  # noqa: BLE001 - the runtime's failure decision classifies it
            self._observe(t0, "error")
            if claims is not None:
                claims.release(eid)  # the runtime's retry runs the step again
            return StepResult(started, now_ms(), error=exc)
        self._observe(t0, "ok")
        if claims is not None:
            stored = claims.complete(eid, value, payload)
            if stored != value:  # taken over while it ran: the other holder's outcome wins
                return self._reused(started, stored)
        return StepResult(started, now_ms(), result=value)

    def _applied(self, eid: str, session: Session | Connection) -> bool:
        """The runtime's dedupe row exists (asked inside the claim's transaction)."""
        return is_applied(session, self.scope, eid)

    def _reused(self, started: int, value: str) -> StepResult:
        if self.metrics:
            self.metrics.reused.labels(self.metrics.pool).inc()
        return StepResult(started, now_ms(), result=value, reused=True)

    def _observe(self, t0: float, result: str) -> None:
        if self.metrics:
            self.metrics.step_seconds.labels(self.metrics.pool, result).observe(
                time.monotonic() - t0
            )

    def _log_event(self, record: Record, r: StepResult | None, started: int) -> None:
        """One JSON line when a step starts (``start``) and when it ends (``ran``, ``reused``,
        ``duplicate``, ``error``): a step cut by kill -9 leaves its ``start`` line."""
        if not self.events_path:
            return
        kind = (
            "start"
            if r is None
            else "error"
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
            "start_ms": started,
            "end_ms": None if r is None else r.ended_ms,
            "kind": kind,
        }
        text = json.dumps(line) + "\n"
        with self._lock:
            if self._events is None:  # line-buffered: each line is in the file once written
                self._events = open(self.events_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._events.write(text)

    def close(self) -> None:
        """Close the events log (a step given up and ending later opens it again)."""
        with self._lock:
            events, self._events = self._events, None
        if events is not None:
            events.close()

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


def _mismatch(eid: str) -> FleetError:
    return FleetError(
        f"event id {eid!r} was already used for a different record value",
        reason=Idempotency.IDEM_PAYLOAD_MISMATCH,
        retriable=False,
    )


def _stopping(eid: str) -> FleetError:
    return FleetError(
        f"member stopping while another member holds step {eid!r}",
        reason=Idempotency.IDEM_IN_PROGRESS,
        retriable=True,
    )
