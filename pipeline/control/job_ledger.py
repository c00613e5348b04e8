"""The job ledger: admission claims and releases on the ``jobs`` topic, keyed by job id.

:meth:`JobLedger.claim` appends a signed :class:`~pipeline.control.job_admission.Claim`, waits
for its offset (``acks=all``), then reads the job's partition up to that offset and returns the
verdict the fold (:class:`~pipeline.control.job_admission.JobBook`) gives the claim: read your
own write through the partition's total order. Records are signed with the host's key (headers
``keyId``, ``sig`` over the value) and a record whose signature does not verify, or whose
``host`` is not the signer's, is skipped by every reader alike.

While the ledger cannot be written or read (broker away, leader not elected), ``claim`` raises
:class:`LedgerUnavailable` (retriable) once its wait is spent: the caller refuses the SPAWN,
nothing is started. :meth:`reconcile` (each maintenance tick) appends the releases this host
owes -- its admitted claims whose worker ended -- and retries them until the broker takes them:
a slot is freed late, never early.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from cryptography.exceptions import InvalidSignature
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import Signer, TrustStore
from pipeline.host.entity_config import ProfileConfig
from pipeline.reasons import Lifecycle
from pipeline.support.clock import now_ms

from . import spawns
from .caps import Admission
from .job_admission import Claim, JobBook, Release, Verdict

log = logging.getLogger(__name__)

H_KEY_ID, H_SIG = "keyId", "sig"


class LedgerUnavailable(Exception):
    """The job ledger could not be written or read in time (retriable: ask again later)."""


def encode(record: Claim | Release, signer: Signer) -> tuple[bytes, list[tuple[str, bytes]]]:
    kind = "claim" if isinstance(record, Claim) else "release"
    fields = {k: getattr(record, k) for k in record.__slots__}
    value = json.dumps({"type": kind, **fields}, sort_keys=True).encode()
    return value, [(H_KEY_ID, signer.key_id.encode()), (H_SIG, signer.sign(value))]


def decode(value: bytes, headers: list[tuple[str, bytes]], trust: TrustStore) -> Any:
    """The claim or release in a ledger record, or None when it is not one we can trust."""
    got = dict(headers or [])
    key = trust.lookup(got.get(H_KEY_ID, b"").decode(errors="replace"))
    try:
        data = json.loads(value)
        if key is None or key.host != data.get("host"):
            return None
        key.key.verify(got.get(H_SIG, b""), value)
        kind = data.pop("type")
        return Claim(**data) if kind == "claim" else Release(**data) if kind == "release" else None
    except (InvalidSignature, ValueError, TypeError, KeyError):
        return None


class JobLedger:
    """One gateway's view of the ledger: a producer and an assign-only reader (no group)."""

    def __init__(
        self,
        *,
        host: str,
        topic: str,
        signer: Signer,
        trust: TrustStore,
        producer: Callable[[], Any],
        consumer: Callable[[], Any],
        wait_s: float = 20.0,
    ) -> None:
        self.host, self.topic, self.signer, self.trust = host, topic, signer, trust
        self._new_producer, self._new_consumer = producer, consumer
        self._producer: Any = None
        self._consumer: Any = None
        self._next: dict[int, int] = {}  # partition -> next offset to fold
        self.book = JobBook()
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._behind = True  # the fold may miss records this host owes releases for
        self._sent: set[str] = set()  # releases appended, not read back yet

    def claim(self, claim: Claim, *, deadline: float | None = None) -> Verdict:
        """Append ``claim`` and fold its partition up to it; its verdict (R-FAIL-8)."""
        until = time.monotonic() + self.wait_s if deadline is None else deadline
        with self._lock:
            try:
                partition, offset = self._append(claim.job, claim, until)
                self._read_to(partition, offset, until)
            except LedgerUnavailable:
                self._behind = True  # the claim may be in the log: reconcile reads it back
                raise
            return self.book.verdicts[claim.spawn_id]

    def reconcile(self, ended: Callable[[list[Claim]], dict[str, bool]]) -> int:
        """Release this host's admitted claims whose worker ``ended`` says is over (gid ->
        whether it was launched at all).

        ``ended`` reads the store, and runs without the ledger's lock: a SPAWN's claim takes
        that lock inside its batch's transaction, which holds SQLite's write lock, so a
        reconcile that waited for the store while holding the ledger's lock deadlocked with it
        until the store's busy timeout (the claim then refused ``LEDGER_UNAVAILABLE``)."""
        with self._lock:
            try:
                if self._behind:  # at boot, or after a claim that may be in the log unread
                    self._catch_up(time.monotonic() + 5.0)
                    self._behind = False
            except LedgerUnavailable as exc:
                log.warning("job ledger: cannot catch up: %s", exc)
                return 0
            held = [c for c in self.book.held_by(self.host) if c.spawn_id not in self._sent]
        if not held:
            return 0
        done = ended(held)
        with self._lock:
            sent = 0
            for c in held:
                if c.spawn_id in done and c.spawn_id not in self._sent:
                    release = Release(
                        job=c.job, spawn_id=c.spawn_id, host=self.host, launched=done[c.spawn_id]
                    )
                    try:
                        self._append(c.job, release, time.monotonic() + 5.0)
                    except LedgerUnavailable as exc:
                        log.warning("job ledger: release of %s waits: %s", c.spawn_id, exc)
                        return sent
                    # folded when read back, in log order: applying it here, ahead of claims
                    # of other hosts still unread, would change their verdicts in our fold
                    self._sent.add(c.spawn_id)
                    sent += 1
            return sent

    def close(self) -> None:
        """At gateway stop: releases in flight get 5 s, the reader leaves."""
        with self._lock:
            if self._producer is not None:
                self._producer.flush(5)
            if self._consumer is not None:
                self._consumer.close()
            self._producer = self._consumer = None

    # -- the log -----------------------------------------------------------------------------
    def _append(self, job: str, record: Claim | Release, until: float) -> tuple[int, int]:
        if self._producer is None:
            self._producer = self._new_producer()
        value, headers = encode(record, self.signer)
        done: list[Any] = []
        try:
            self._producer.produce(
                self.topic, key=job.encode(), value=value, headers=headers,
                on_delivery=lambda err, msg: done.append((err, msg)),
            )  # fmt: skip
        except (BufferError, KafkaException) as exc:  # queue full, topic unknown to the client
            raise LedgerUnavailable(f"cannot append to {self.topic}: {exc}") from exc
        while not done and time.monotonic() < until:
            self._producer.poll(0.1)
        if not done or done[0][0] is not None:
            why = done[0][0] if done else "no delivery report in time"
            raise LedgerUnavailable(f"cannot append to {self.topic}: {why}")
        msg = done[0][1]
        return int(msg.partition()), int(msg.offset())

    def _read_to(self, partition: int, offset: int, until: float) -> None:
        if self._consumer is None:
            self._consumer = self._start_reader(until)
        while self._next.get(partition, 0) <= offset:
            if time.monotonic() >= until:
                raise LedgerUnavailable(f"cannot read {self.topic}[{partition}] up to {offset}")
            for msg in self._consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    continue
                self._next[msg.partition()] = msg.offset() + 1
                record = decode(msg.value(), msg.headers() or [], self.trust)
                if record is not None:
                    self.book.apply(record)

    def _catch_up(self, until: float) -> None:
        if self._consumer is None:
            self._consumer = self._start_reader(until)
        for tp in self._consumer.assignment():
            try:
                _, high = self._consumer.get_watermark_offsets(tp, timeout=1.0)
            except Exception as exc:  # KafkaException: broker away
                raise LedgerUnavailable(f"cannot read the end of {self.topic}: {exc}") from exc
            if high > 0:
                self._read_to(tp.partition, high - 1, until)

    def _start_reader(self, until: float) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = self._new_consumer()
        meta = None
        while meta is None or self.topic not in meta.topics:
            if time.monotonic() >= until:
                consumer.close()
                raise LedgerUnavailable(f"cannot describe {self.topic}")
            try:
                meta = consumer.list_topics(self.topic, timeout=1.0)
            except Exception:  # noqa: BLE001  # KafkaException: broker away, retried
                meta = None
        parts = sorted(meta.topics[self.topic].partitions)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        return consumer


ORPHAN_CLAIM_MS = 600_000  # a claim with no spawn row this long: its SPAWN never committed


def ended_spawns(sessions: sessionmaker[Session], claims: list[Claim]) -> dict[str, bool]:
    """The claims whose worker is over, and whether it was launched: its row reaped or failed
    (launched, or maybe: counted), refused (never), or no row long after the claim (its SPAWN
    never committed, e.g. dead-lettered after claiming: never; a row is purged only long after
    its release was made)."""
    out = {}
    with sessions() as s:
        for c in claims:
            row = spawns.get(s, c.spawn_id)
            if row is None and now_ms() - c.at_ms > ORPHAN_CLAIM_MS:
                out[c.spawn_id] = False
            elif row is not None and row.state in spawns.FINISHED:
                out[c.spawn_id] = row.state != spawns.REFUSED
    return out


def fleet_admission(
    ledger: JobLedger, *, host: str, spec: ProfileConfig, job: str, spawn_id: str, expires_ms: int
) -> Admission:
    """The job-wide verdict for one SPAWN of ``job``, waiting for the ledger at most half the
    SPAWN's remaining life (the refusal must reach the requester before its deadline)."""
    claim = Claim(
        job=job, spawn_id=spawn_id, host=host, profile=spec.name,
        max_live=spec.max_live_per_job, max_spawns=spec.max_spawns_per_job, at_ms=now_ms(),
    )  # fmt: skip
    wait_s = max(0.5, min(ledger.wait_s, (expires_ms - now_ms()) / 2000))
    try:
        verdict = ledger.claim(claim, deadline=time.monotonic() + wait_s)
    except LedgerUnavailable as exc:
        return Admission(admitted=False, reason=Lifecycle.LEDGER_UNAVAILABLE, detail=str(exc))
    if verdict.admitted:
        return Admission(admitted=True)
    return Admission(admitted=False, reason=Lifecycle.CAP_EXCEEDED, detail=verdict.detail)
