"""The inbox handler: verify, then route each record by how its recipient takes delivery.

* **Pull** recipients (mains, orchestrators): the message becomes a held row, staged in the
  runtime's batch transaction beside its dedupe row -> at-least-once (R-ACK-2, pull path).
* **Inject** recipients (workers): the inject is an after-commit effect -> the offset is committed
  before it, so a crash loses it visibly (no ``INJECTED`` -> ``FAILED``) and never doubles it.
* Conversations (R-CONV-1): an ``ASK`` to a main with no open pull is answered
  ``NO_WAITER`` on arrival; an ``ANSWER`` (to a worker or a main) is delivered only while its
  turn waits, else ``TOO_LATE`` goes back to the answerer.
* Any verification failure is a ``DeadLetter`` with its reason code: never a crash, never a wedge.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.orm import Session, sessionmaker

from pipeline import reasons
from pipeline.control import spawns
from pipeline.control.metrics import LifecycleMetrics
from pipeline.envelope import (
    EXPIRED,
    REPLAY,
    UNKNOWN_SENDER,
    BatchVerifier,
    BoundedSeenSet,
    Envelope,
    Kind,
    Verifier,
)
from pipeline.envelope.receipts import read_receipts
from pipeline.envelope.verify import Verified
from pipeline.errors import EnvelopeError
from pipeline.host import deadlines
from pipeline.host.conversations import ABANDONED, ANSWERED, Conversations
from pipeline.host.held import held_table
from pipeline.host.outbound import Publisher
from pipeline.host.tracking import FORWARD
from pipeline.presence.model import Delivery
from pipeline.reasons import Lifecycle
from pipeline.record_headers import pack_headers
from pipeline.runtime import Record, Staged
from pipeline.runtime.batch_session import InTransaction
from pipeline.runtime.outcomes import ACK, DeadLetter, Outcome
from pipeline.runtime.ports import WARM_UP_ID
from pipeline.store import with_retry
from pipeline.support.clock import now_ms
from pipeline.tracing import TRACING

from .entities import LocalEntities
from .injection import TRACKED_KINDS, InjectionQueue, past_inject_deadline
from .metrics import GatewayMetrics
from .sender_receipts import RECEIPT_KINDS, SenderReceipts

log = logging.getLogger(__name__)
T = TypeVar("T")

BROADCAST_PREFIX = "broadcast."
UNKNOWN_RECIPIENT = reasons.Delivery.UNKNOWN_RECIPIENT
HELD_CAP_EXCEEDED = reasons.Delivery.HELD_CAP_EXCEEDED
RECIPIENT_GONE = Lifecycle.RECIPIENT_GONE
INJECT_DEADLINE_PASSED = reasons.Delivery.INJECT_DEADLINE_PASSED
REPLY_TTL_S = 300.0
_ONE_HELD = 1  # a hold, as an item of ``InboxHandler._stored``
_KIND_VALUE = {kind: kind.value for kind in Kind}  # a dict lookup, not the enum's property
_STILL_A_DUPLICATE = frozenset({REPLAY, EXPIRED})
# how long a record from a sender the roster does not know waits for the roster to have read
# every presence record produced before it (the follower's horizon advances about once a second)
ROSTER_WAIT_S = 5.0
# how often the held counts are read afresh while no recipient nears the cap (``_HeldCounter``)
RECOUNT_S = 10.0


@dataclass
class _HeldCounter:
    """Per-recipient pending counts: the store's count plus this handler's holds since. Drains
    only lower the true count, so the estimate errs high; a recipient that reaches the cap is
    counted afresh (at most once a second) before a refusal, and every count is taken afresh
    each ``RECOUNT_S`` for the rows other writers hold (a gateway's notices)."""

    refreshed: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)


class InboxHandler:
    """Handles one inbox record (the runtime's ``Handler``)."""

    def __init__(
        self,
        *,
        host: str,
        verifier: Verifier,
        entities: LocalEntities,
        publisher: Publisher,
        conversations: Conversations,
        injections: InjectionQueue,
        reads: sessionmaker[Session],
        metrics: GatewayMetrics,
        seen: BoundedSeenSet,
        max_held_per_recipient: int = 10_000,
        lifecycle: LifecycleMetrics | None = None,
        tracked: Sequence[deadlines.Tracked] = (FORWARD,),
        batch_verifier: BatchVerifier | None = None,
    ) -> None:
        # a RECEIPTS record's items, read ahead (``read_ahead``) by record
        self._unpacked: dict[tuple[str, int, int], list[Envelope]] = {}
        # verifies a whole batch across a thread pool before its transaction (``prepare``)
        self.batch_verifier = batch_verifier
        self._prepared: dict[tuple[str, int, int], Verified | Exception] = {}
        # the roster's horizon when the prepared batch was verified: the roster had read at
        # least that far when it judged those records' senders
        self._prepared_horizon: int | None = None
        self.lifecycle = lifecycle
        self.receipts = SenderReceipts(tracked=tracked, metrics=metrics)
        self.seen = seen  # the verifier's bounded seen-set; the store's dedupe rows back it
        self.host = host
        self.verifier = verifier
        self.entities = entities
        self.publisher = publisher
        self.conversations = conversations
        self.injections = injections
        self.reads = reads
        self.metrics = metrics
        self.max_held = max_held_per_recipient
        self._held = _HeldCounter()

    # -- entry -------------------------------------------------------------------------------
    def verify(self, record: Record) -> DeadLetter | None:
        """The verify stage alone (the runtime's ``Verifies``), for a record whose ``msgId`` was
        already applied: ``None`` if it verifies (a duplicate, dropped and counted by the
        runtime), else its dead letter. A tampered copy never passes for a duplicate."""
        try:
            self._verify(record)
        except EnvelopeError as exc:
            # EXPIRED is the one check that changes with time alone: an authentic copy of a
            # message applied in time (a redelivery after a crash and a long stop) is a
            # duplicate, not a failure -- dead-lettering it would send its sender a false FAILED.
            if exc.reason in _STILL_A_DUPLICATE:
                return None
            return self._refused(record, exc)
        return None

    def prepare(self, records: Sequence[Record]) -> None:
        """The runtime's ``Prepares`` stage: verify the batch off the consume thread; ``handle``
        and ``verify`` then take each record's stored result (same stages, same order)."""
        if self.batch_verifier is None:
            return
        self._prepared_horizon = self._horizon()
        outcomes = self.batch_verifier.verify_all(
            [(r.topic, r.key, r.headers, r.value) for r in records]
        )
        self._prepared = {
            (r.topic, r.partition, r.offset): o for r, o in zip(records, outcomes, strict=True)
        }

    def read_ahead(self, tx: InTransaction, records: Sequence[Record]) -> None:
        """The runtime's ``ReadsAhead`` stage: the tracked send of every receipt in the batch
        (verified by ``prepare``; a ``RECEIPTS`` record's items too), read in the batch
        transaction instead of a read transaction of its own per receipt
        (``SenderReceipts.read_ahead``)."""
        self._unpacked = {}
        verified: list[Envelope] = []
        for r in records:
            done = self._prepared.get((r.topic, r.partition, r.offset))
            if not isinstance(done, Verified):
                continue
            if done.envelope.kind is not Kind.RECEIPTS:
                verified.append(done.envelope)
                continue
            with contextlib.suppress(EnvelopeError):  # ``handle`` reads it again and refuses it
                items = self._unpacked[(r.topic, r.partition, r.offset)] = read_receipts(
                    done.envelope
                )
                verified.extend(items)
        self.receipts.read_ahead(tx.connection(), verified)

    def warm(self, session: Session) -> None:
        """The runtime's ``Warms`` stage (rolled back): the held row insert, the receipts' read
        and settle, and the pending count, compiled before the first batch instead of inside it."""
        tx = Staged()
        env = Envelope.new(kind=Kind.REPLY, sender="warm-up", to="warm-up", body=b"", ttl_s=1)
        rec = Record(
            topic="", partition=-1, offset=-1, key=None, value=b"", headers=(), timestamp_ms=0
        )
        tx.insert(held_table, _held_row(WARM_UP_ID, env, rec, 0))
        tx.flush(session)
        self.receipts.warm(session)
        self._pending(WARM_UP_ID)
        self._held.refreshed = 0.0  # the first real batch reads the counts afresh

    def _verify(self, record: Record) -> Verified:
        done = self._prepared.pop((record.topic, record.partition, record.offset), None)
        if done is not None:
            if isinstance(done, Exception):
                raise done
            return done
        return self._verify_afresh(record)

    def _verify_afresh(self, record: Record) -> Verified:
        return self.verifier.verify(
            topic=record.topic,
            key=record.key,
            headers=list(record.headers),
            value=record.value,
        )

    def _horizon(self) -> int | None:
        horizon = getattr(self.verifier.presence, "horizon_ms", None)
        return None if horizon is None else int(horizon())

    def _roster_caught_up_to(self, record: Record, judged_at: int | None) -> bool:
        """A sender unknown here may be one whose presence this host has not read yet: records
        cross topics in no common order, so a peer's first record after its (re)start can
        overtake its heartbeat (seen after a clean restart: the restarted host's senders read
        as departed since its tombstones). ``judged_at`` is the roster's horizon when the
        sender was judged unknown (taken before the verification: a batch is verified ahead of
        its transaction, and the roster may catch up in between). If the roster had already
        read every presence record produced before ``record`` then, the refusal stands (False).
        Else wait, bounded, until it has, and return True: verify again."""
        if judged_at is None or judged_at >= record.timestamp_ms:
            return False
        deadline = time.monotonic() + ROSTER_WAIT_S
        while (self._horizon() or 0) < record.timestamp_ms and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    def _refused(self, record: Record, exc: EnvelopeError) -> DeadLetter:
        """R-ENV-4: any failed check is a dead letter with its reason, counted, logged loudly."""
        self.metrics.verify_failure(exc.reason)
        log.warning(
            "inbox record %s refused: %s (dead-lettered)", record.ref, exc.reason, exc_info=False
        )
        return DeadLetter(reason=exc.reason, error=str(exc))

    def _checked(self, record: Record, done: Verified | Exception | None) -> Verified | Outcome:
        """``handle``'s verification when the batch stage did not verify ``record`` (None:
        verified now) or refused it (the exception it raised)."""
        judged_at = self._horizon() if done is None else self._prepared_horizon
        try:
            if done is None:
                return self._verify_afresh(record)
            if isinstance(done, Exception):
                raise done
            return done
        except EnvelopeError as exc:
            if exc.reason == REPLAY:
                self.metrics.verify_failure(exc.reason)
                return ACK  # a msgId already applied: dropped and counted, not dead-lettered
            if exc.reason != UNKNOWN_SENDER or not self._roster_caught_up_to(record, judged_at):
                return self._refused(record, exc)
        try:  # the roster has now read every presence record produced before this one
            return self._verify_afresh(record)
        except EnvelopeError as again:
            return self._refused(record, again)

    def handle(self, record: Record, tx: Staged) -> Outcome:
        done = self._prepared.pop((record.topic, record.partition, record.offset), None)
        if type(done) is Verified:
            verified = done
        else:
            checked = self._checked(record, done)
            if not isinstance(checked, Verified):
                return checked
            verified = checked
        env = verified.envelope
        if TRACING.on:  # fleet.inbox.consume: consumed and verified
            TRACING.consumed(env, record.topic, record.headers)
        if env.to.startswith(BROADCAST_PREFIX):
            return self._broadcast(env, record, tx)
        entity = self.entities.get(env.to)
        if entity is None:
            return self._no_entity(env)
        tx.after_store_each(self._stored, env.msg_id)  # into the seen-set, per batch
        if env.kind is Kind.RECEIPTS:
            return self._each_receipt(env, record, tx, entity.delivery, verified.signer_host)
        if entity.delivery == Delivery.PULL:
            return self._to_pull(env, record, tx, verified.signer_host)
        return self._to_inject(env, record, tx, verified.signer_host)

    def _each_receipt(
        self, env: Envelope, record: Record, tx: Staged, delivery: Delivery, signer_host: str
    ) -> Outcome:
        """A ``RECEIPTS`` record: each item handled as the single ``INJECTED`` it stands for,
        in order; the first item not acknowledged is the record's outcome (the runtime then
        rolls back what the items before it staged: a record applies whole or not at all)."""
        items = self._unpacked.pop((record.topic, record.partition, record.offset), None)
        if items is None:
            items = read_receipts(env)
        tx.after_store(functools.partial(self.metrics.receipts_unpacked.inc, len(items)))
        for item in items:
            if delivery == Delivery.PULL:
                outcome = self._to_pull(item, record, tx, signer_host)
            else:
                outcome = self._to_inject(item, record, tx, signer_host)
            if outcome is not ACK:
                return outcome
        return ACK

    def _no_entity(self, env: Envelope) -> DeadLetter:
        """R-LIFE-1: a worker stopped or reaped here has no inbox any more, so its
        mail is ``RECIPIENT_GONE`` (the FAILED reporter tells the sender once); anyone else
        unknown here is ``UNKNOWN_RECIPIENT``."""
        if self._read(lambda s: spawns.is_gone(s, env.to)):
            if self.lifecycle is not None:
                self.lifecycle.recipient_gone.labels("inbox").inc()
            return DeadLetter(
                reason=RECIPIENT_GONE, error=f"{env.to} was stopped or reaped on {self.host}"
            )
        return DeadLetter(
            reason=UNKNOWN_RECIPIENT, error=f"{env.to} is not a local entity of {self.host}"
        )

    def _read(self, query: Callable[[Session], T]) -> T:
        """A read retried like a write (pipeline.store.retry): a store restart is not a failure."""

        def once() -> T:
            with self.reads() as s:
                return query(s)

        return with_retry(once, what="inbox read")

    # -- pull path ---------------------------------------------------------------------------
    def _to_pull(self, env: Envelope, record: Record, tx: Staged, signer_host: str) -> Outcome:
        if env.kind == Kind.ANSWER and env.turn_id is not None:
            # a main that asked may have abandoned (or let expire) its turn: same rule as workers
            if not self._turn_waiting(env.turn_id):
                self._reply(tx, env, Kind.TOO_LATE, signer_host, body=b"")
                self.metrics.too_late.inc()
                return ACK
            tx.call(functools.partial(_close_turn, turn_id=env.turn_id, state=ANSWERED))
        if env.kind == Kind.ASK:
            listening = self._read(lambda s: self.conversations.has_open_pull(s, env.to))
            if not listening:
                self._reply(tx, env, Kind.NO_WAITER, signer_host, body=b"")
                self.metrics.no_waiter.inc()
                return ACK
        if env.kind in RECEIPT_KINDS:
            taken = self._receipt(env, record, tx, signer_host)
            if taken is not None:
                return taken
        return self._hold(env, record, tx, env.to)

    def _receipt(
        self, env: Envelope, record: Record, tx: Staged, signer_host: str
    ) -> Outcome | None:
        """A receipt about a send of this host, for a pull or an inject entity alike: settle
        the send it is about (None: then deliver it to its recipient as any message), or its
        outcome instead -- dropped (a ``FAILED`` the deadline already gave: exactly one per
        send) or refused (an ``INJECTED`` signed by a host the send did not go to)."""
        try:
            if not self.receipts.take(env, tx, self._read, signer_host):
                return ACK
        except EnvelopeError as exc:
            return self._refused(record, exc)
        return None

    def _turn_waiting(self, turn_id: str) -> bool:
        with self.reads() as s:
            return self.conversations.turn_waiting(s, turn_id)

    def _hold(self, env: Envelope, record: Record, tx: Staged, recipient: str) -> Outcome:
        if self._pending(recipient) >= self.max_held:
            return DeadLetter(
                reason=HELD_CAP_EXCEEDED,
                error=f"{recipient} already holds {self.max_held} undrained messages",
            )
        tx.insert(held_table, _held_row(recipient, env, record, now_ms()))
        if TRACING.on:
            TRACING.held(env, recipient)
        self._held.counts[recipient] = self._held.counts.get(recipient, 0) + 1
        tx.after_store_each(self._stored, _ONE_HELD)
        return ACK

    def _stored(self, items: list[str | int]) -> None:
        """A batch's bookkeeping once its transaction is durable, in one call: its applied
        msgIds (``str``) into the seen-set, its holds (``_ONE_HELD`` each) counted."""
        ids = [item for item in items if type(item) is str]
        if ids:
            self.seen.add_all(ids)
        if len(ids) < len(items):
            self.metrics.held_total.inc(len(items) - len(ids))

    def _pending(self, recipient: str) -> int:
        now = time.monotonic()
        age = now - self._held.refreshed
        at_cap = self._held.counts.get(recipient, 0) >= self.max_held
        if age > RECOUNT_S or (at_cap and age > 1.0):
            from sqlalchemy import func, select

            stmt = (
                select(held_table.c.recipient, func.count())
                .where(held_table.c.drained_at_ms.is_(None))
                .group_by(held_table.c.recipient)
            )
            self._held.counts = self._read(lambda s: {r[0]: int(r[1]) for r in s.execute(stmt)})
            self._held.refreshed = now
        return self._held.counts.get(recipient, 0)

    # -- forward path ------------------------------------------------------------------------
    def _to_inject(self, env: Envelope, record: Record, tx: Staged, signer_host: str) -> Outcome:
        if env.kind in RECEIPT_KINDS:  # a worker's own tracked send: settled as a main's is
            taken = self._receipt(env, record, tx, signer_host)
            if taken is not None:  # refused, or a FAILED the deadline gave (and injected) first
                return taken
        if env.kind in TRACKED_KINDS and past_inject_deadline(env):
            # the sender signed its inject deadline as expiresAt and is about to be (or was)
            # told FAILED: injecting now would make that FAILED a lie (at-most-once)
            self.metrics.inject_deadline_passed.labels("inbox").inc()
            log.warning(
                "brief %s from %s to %s arrived %d ms past its inject deadline: dead-lettered "
                "%s, not injected",
                env.msg_id, env.sender, env.to, now_ms() - env.expires_at_ms,
                INJECT_DEADLINE_PASSED,
            )  # fmt: skip
            return DeadLetter(
                reason=INJECT_DEADLINE_PASSED,
                error=f"arrived past its inject deadline (expiresAt {env.expires_at_ms})",
            )
        if env.kind == Kind.ANSWER:
            turn = env.turn_id
            waiting = turn is not None and self._read(
                lambda s: self.conversations.turn_waiting(s, turn)
            )
            if not waiting:
                self._reply(tx, env, Kind.TOO_LATE, signer_host, body=b"")
                self.metrics.too_late.inc()
                return ACK
            tx.call(functools.partial(_close_turn, turn_id=str(env.turn_id), state=ANSWERED))
        if env.kind == Kind.NO_WAITER and env.turn_id:
            tx.call(functools.partial(_close_turn, turn_id=env.turn_id, state=ABANDONED))
        # Commit before inject: the runtime runs this only after the offset commit succeeded.
        tx.after_commit(lambda: self.injections.submit(env.to, env, reply_host=signer_host))
        return ACK

    # -- broadcast ---------------------------------------------------------------------------
    def _broadcast(self, env: Envelope, record: Record, tx: Staged) -> Outcome:
        group = env.to[len(BROADCAST_PREFIX) :]
        for member in self.entities.members(group):
            if member.delivery == Delivery.PULL:
                self._hold(env, record, tx, member.gid)
            else:
                tx.after_commit(
                    functools.partial(self.injections.submit, member.gid, env, reply_host=None)
                )
        return ACK

    # -- replies from the gateway itself ----------------------------------------------------
    def _reply(self, tx: Staged, env: Envelope, kind: Kind, to_host: str, *, body: bytes) -> None:
        reply = Envelope.new(
            kind=kind,
            sender=env.to,
            to=env.sender,
            body=body,
            ttl_s=REPLY_TTL_S,
            trace_id=env.trace_id,
            turn_id=env.turn_id,
        )
        tx.call(lambda s: self.publisher.stage(s, reply, to_host=to_host))


def _held_row(recipient: str, env: Envelope, record: Record, now: int) -> dict[str, object]:
    return {
        "recipient": recipient,
        "msg_id": env.msg_id,
        "kind": _KIND_VALUE[env.kind],
        "sender": env.sender,
        "trace_id": env.trace_id,
        "turn_id": env.turn_id,
        "body": env.body,
        "headers": pack_headers(record.headers),
        "topic": record.topic,
        "ts_ms": env.ts_ms,
        "expires_at_ms": env.expires_at_ms,
        "held_at_ms": now,
    }


def _close_turn(session: Session, *, turn_id: str, state: str) -> None:
    Conversations.close_turn(session, turn_id, state)
