"""Forward-path injection, after the offset commit, one worker thread per local entity.

Per-recipient order is kept (one queue per gid). A busy target (``TARGET_BUSY``, retriable) is
retried with backoff until the message expires; success publishes ``INJECTED`` (through the
outbox) to the sender, a final failure publishes ``FAILED``. A crash anywhere here loses the
inject *visibly*: the sender's deadline turns the missing ``INJECTED`` into one ``FAILED``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Envelope, Kind
from pipeline.errors import FleetError
from pipeline.failures.retry import BackoffPolicy
from pipeline.reasons import Delivery, Verification

from .entities import LocalEntities
from .metrics import GatewayMetrics
from .outbound import Publisher
from .receipts import failed_body, injected_body
from .render import for_injector

log = logging.getLogger(__name__)

RECEIPT_TTL_S = 3600.0
TRACKED_KINDS = frozenset({Kind.SEND, Kind.ANSWER})
RECEIPT_BATCH = 200


def past_inject_deadline(env: Envelope, now_ms: int | None = None) -> bool:
    """True once this host's clock is past ``expiresAt`` -- for a tracked brief, the inject
    deadline its sender signed. No skew allowance in the brief's favour (refuse when in doubt):
    the sender waits ``clock_skew_s`` beyond it before its own ``INJECT_TIMEOUT``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now > env.expires_at_ms


@dataclass(frozen=True, slots=True)
class _Receipt:
    envelope: Envelope
    host: str


@dataclass(frozen=True, slots=True)
class _Job:
    gid: str
    envelope: Envelope
    reply_host: str | None
    queued_at: float


class InjectionQueue:
    def __init__(
        self,
        *,
        entities: LocalEntities,
        sessions: sessionmaker[Session],
        publisher: Publisher,
        metrics: GatewayMetrics,
        busy_policy: BackoffPolicy | None = None,
        on_injected: Callable[[str, Envelope], None] | None = None,
    ) -> None:
        self.entities = entities
        self.sessions = sessions
        self.publisher = publisher
        self.metrics = metrics
        self.busy = busy_policy or BackoffPolicy(base_s=0.05, max_s=2.0, max_attempts=10_000)
        self.on_injected = on_injected
        self._queues: dict[str, queue.Queue[_Job | None]] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def submit(self, gid: str, envelope: Envelope, *, reply_host: str | None) -> None:
        with self._lock:
            q = self._queues.get(gid)
            if q is None:
                q = queue.Queue()
                self._queues[gid] = q
                t = threading.Thread(
                    target=self._work, args=(q,), name=f"inject-{gid}", daemon=True
                )
                t.start()
                self._threads.append(t)
        q.put(_Job(gid, envelope, reply_host, time.monotonic()))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for q in list(self._queues.values()):
            q.put(None)
        for t in self._threads:
            t.join(timeout)

    def idle(self) -> bool:
        return all(q.unfinished_tasks == 0 for q in self._queues.values())

    def _work(self, q: queue.Queue[_Job | None]) -> None:
        # Receipts (INJECTED or FAILED) of a burst go out in ONE outbox transaction once the
        # queue runs dry, or every RECEIPT_BATCH injects: an inject never waits for a database
        # write, and a receipt is at most one burst behind its inject.
        pending: list[_Receipt] = []
        while True:
            job = q.get()
            try:
                if job is None:
                    self._flush(pending)
                    return
                receipt = self._inject(job)
                if receipt is not None:
                    pending.append(receipt)
                if q.empty() or len(pending) >= RECEIPT_BATCH:
                    self._flush(pending)
            except Exception:  # one bad job must not kill the entity's worker
                log.exception("injection worker error")
            finally:
                q.task_done()

    def _flush(self, pending: list[_Receipt]) -> None:
        if not pending:
            return
        with self.sessions.begin() as s:
            for r in pending:
                self.publisher.stage(s, r.envelope, to_host=r.host)
        pending.clear()

    def _inject(self, job: _Job) -> _Receipt | None:
        env = job.envelope
        entity = self.entities.get(job.gid)
        injector = entity.injector if entity is not None else None
        if injector is None:
            return self._failed(job, Delivery.NO_INJECTOR, f"{job.gid} has no injector configured")
        body = for_injector(env, job.gid)  # a control kind lands as a sentence, not raw bytes
        attempt = 0
        while True:
            if self._stop.is_set():
                return None  # shutting down: the sender's deadline reports the loss
            if past_inject_deadline(env):
                if env.kind in TRACKED_KINDS:  # expiresAt is the sender's inject deadline
                    self.metrics.inject_deadline_passed.labels("queue").inc()
                    return self._failed(
                        job, Delivery.INJECT_DEADLINE_PASSED, "inject deadline passed in the queue"
                    )
                return self._failed(
                    job, Verification.EXPIRED, "expired while the target stayed busy"
                )
            attempt += 1
            try:
                injector.inject(
                    gid=job.gid,
                    msg_id=env.msg_id,
                    kind=env.kind.value,
                    sender=env.sender,
                    body=body,
                )
            except FleetError as exc:
                if exc.retriable:
                    time.sleep(self.busy.delay_for(min(attempt, 6)))
                    continue
                return self._failed(job, exc.reason, str(exc))
            self.metrics.queue_to_inject_seconds.observe(time.monotonic() - job.queued_at)
            if self.on_injected is not None:
                self.on_injected(job.gid, env)
            return self._receipt(job, Kind.INJECTED, injected_body(env.msg_id, job.gid))

    def _receipt(self, job: _Job, kind: Kind, body: bytes) -> _Receipt | None:
        env = job.envelope
        if job.reply_host is None or env.kind not in TRACKED_KINDS:
            return None
        receipt = Envelope.new(
            # a FAILED has the same id on every path (deadline, DLQ reporter, inject failure):
            # the sender's dedupe and unique held row keep exactly one
            msg_id=f"failed-{env.msg_id}" if kind == Kind.FAILED else None,
            kind=kind,
            sender=self.publisher.gateway_id,
            to=env.sender,
            body=body,
            ttl_s=RECEIPT_TTL_S,
            trace_id=env.trace_id,
        )
        return _Receipt(receipt, job.reply_host)

    def _failed(self, job: _Job, reason: str, error: str) -> _Receipt | None:
        env = job.envelope
        log.warning("inject of %s into %s failed: %s %s", env.msg_id, job.gid, reason, error)
        body = failed_body(env.msg_id, job.gid, reason=reason, error=error, stage="inject")
        return self._receipt(job, Kind.FAILED, body)
