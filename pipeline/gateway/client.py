"""The library API for local entities: send, ask, answer, broadcast, poll.

Everything goes through the host's store, never the broker: a send is an outbox row (plus a
forward-tracking row when the recipient takes delivery by inject) in one transaction, so it
succeeds while the broker is down; the relay ships it later. ``to`` is resolved through the
roster the gateway mirrors into the store: a recipient never announced (or retracted by a
tombstone) is an immediate ``UNKNOWN_RECIPIENT``, a reaped worker (its departure record said
why it left) an immediate ``RECIPIENT_GONE``; one whose last signed binding is known but
who is not heard from right now (a broker outage, a restarting host) is accepted and tracked as
usual -- deadlines and ``expiresAt`` bound how long its messages wait (docs/presence.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope import GATEWAY_KINDS, Envelope, Kind
from pipeline.errors import DeliveryError, FleetError
from pipeline.host import dbapi, deadlines, roster_cache
from pipeline.host.conversations import ABANDONED, Conversations
from pipeline.host.held import HeldMessage, HeldStore, held_table
from pipeline.host.outbound import Publisher
from pipeline.host.senders import LocalSenders
from pipeline.host.tracking import FORWARD
from pipeline.reasons import Delivery, Lifecycle, Verification
from pipeline.store import read_sessions
from pipeline.support.clock import now_ms

from .metrics import GatewayMetrics
from .writer_session import WriterSession

UNKNOWN_RECIPIENT = Delivery.UNKNOWN_RECIPIENT
RECIPIENT_GONE = Lifecycle.RECIPIENT_GONE
TRACKED = frozenset({Kind.SEND, Kind.ANSWER})


@dataclass(frozen=True, kw_only=True)
class SendRequest:
    """One :meth:`GatewayClient.send`'s arguments, for :meth:`GatewayClient.send_all`."""

    sender: str
    to: str
    body: bytes
    kind: Kind = Kind.SEND
    ttl_s: float | None = None
    trace_id: str | None = None
    turn_id: str | None = None


class GatewayClient:
    """What a local entity uses: send, ask, answer, abandon, broadcast, poll (R-ACK, R-CONV).

    Every send is an outbox row in the host's store (works while the broker is down).
    """

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        publisher: Publisher,
        inject_deadline_s: float = 30.0,
        clock_skew_s: float = 30.0,
        default_ttl_s: float = 3600.0,
        local_senders: LocalSenders | None = None,
        metrics: GatewayMetrics | None = None,
        bindings: roster_cache.KnownBindings | None = None,
    ) -> None:
        self.metrics = metrics
        # the gateway's own client: recipients resolved once per change of the mirror
        self.bindings = bindings
        self.sessions = sessions
        self.publisher = publisher
        self.inject_deadline_s = inject_deadline_s
        self.clock_skew_s = clock_skew_s
        self.default_ttl_s = default_ttl_s
        self.local_senders = local_senders
        bind = sessions.kw.get("bind")
        self.reads = read_sessions(bind) if isinstance(bind, Engine) else sessions
        self.held = HeldStore(sessions, reads=self.reads)
        self.conversations = Conversations(sessions)

    @property
    def host(self) -> str:
        return self.publisher.host

    def _check_sender(self, session: Session, sender: str) -> None:
        if self.local_senders is not None:
            self.local_senders.check(session, sender)

    def knows(self, gid: str) -> bool:
        """True when ``gid`` is live in the roster mirrored into this host's store (heard from
        within its TTL, judged against the gateway's roster horizon)."""
        with self.reads() as s:
            return roster_cache.lookup(s, gid, now_ms()) is not None

    def binding(self, gid: str) -> roster_cache.RosterEntry | None:
        """The last signed binding of ``gid`` this host knows, live or not."""
        with self.reads() as s:
            return roster_cache.lookup(s, gid)

    def roster(self) -> list[roster_cache.RosterEntry]:
        """The live roster as this host's gateway last mirrored it into the store."""
        with self.reads() as s:
            return roster_cache.live(s, now_ms())

    def _resolve(self, session: Session, to: str) -> roster_cache.RosterEntry:
        """``to``'s last signed binding, read in ``session``'s transaction (or kept from an
        earlier read while the mirror is unchanged, :class:`roster_cache.KnownBindings`), or
        the refusal."""
        kept = self.bindings
        generation = 0
        if kept is not None:
            entry, generation = kept.get(to)
            if entry is not None:
                return entry
        entry = roster_cache.lookup(session, to)
        if entry is not None:
            if kept is not None:
                kept.keep(entry, generation)
            return entry
        gone = roster_cache.departed(session, to)
        if gone is not None:
            host, cause = gone
            raise DeliveryError(
                f"recipient {to!r} is gone: a worker of {host} that was {cause} (reaped); "
                "nothing is delivered to it",
                reason=RECIPIENT_GONE,
                context={"to": to, "host": host, "gone": cause},
            )
        raise DeliveryError(
            f"unknown recipient {to!r}: no signed presence binding (never announced, or "
            "retracted by a tombstone)",
            reason=UNKNOWN_RECIPIENT,
            context={"to": to},
        )

    def send(
        self,
        *,
        sender: str,
        to: str,
        body: bytes,
        kind: Kind = Kind.SEND,
        ttl_s: float | None = None,
        trace_id: str | None = None,
        turn_id: str | None = None,
    ) -> Envelope:
        """Queue one message; returns its envelope (``msg_id`` correlates receipts).

        A tracked kind to an inject-mode recipient carries its inject deadline as ``expiresAt``
        (signed, so no relay can stretch it): its recipient's gateway refuses to inject it after
        that (``INJECT_DEADLINE_PASSED``). The sender's tracker waits ``clock_skew_s`` longer
        before its ``INJECT_TIMEOUT``, so a recipient whose clock lags by up to that much has
        already refused the brief when the sender is told it failed (docs/gateway.md).
        """
        request = SendRequest(
            sender=sender,
            to=to,
            body=body,
            kind=kind,
            ttl_s=ttl_s,
            trace_id=trace_id,
            turn_id=turn_id,
        )
        env = self._envelope(request)
        with self.sessions.begin() as s:
            env = self._stage(s, env, {})
        return env

    def send_all(
        self, requests: Sequence[SendRequest], *, writer: WriterSession | None = None
    ) -> list[Envelope | FleetError]:
        """Queue many messages in one transaction (group commit); one result per request.

        The same checks and the same rows as :meth:`send` (the same :meth:`_stage`). A refused
        send (``UNKNOWN_RECIPIENT``, ``NOT_LOCAL_SENDER``, ``BRANCH_ABANDONED`` ...) comes back as
        its :class:`FleetError` and leaves the others untouched: the group is first tried as one
        plain transaction (the common case: nothing refused); if anything was refused, that
        transaction is rolled back whole and the group is written again with one savepoint per
        send. A failure of the commit itself raises (nothing of the group is queued).
        ``writer``: the transactions run on its held Session (the socket's committer).
        """
        results: list[Envelope | FleetError] = []
        todo: list[tuple[int, Envelope]] = []
        for request in requests:
            try:
                env = self._envelope(request)
            except FleetError as exc:
                results.append(exc)
            else:
                todo.append((len(results), env))
                results.append(env)
        if not todo:
            return results
        begin = self.sessions.begin if writer is None else writer.begin
        stage = self._stage
        try:
            with begin() as s:
                known: dict[str, roster_cache.RosterEntry] = {}  # this transaction's lookups
                rows: list[tuple[Envelope, str]] = []  # the outbox rows, written together
                later = dbapi.later_for(s)  # PostgreSQL: the tracking rows go with them
                for i, env in todo:
                    results[i] = stage(s, env, known, rows, later)
                # the socket's writer commits right after: on PostgreSQL the last rows may
                # carry its COMMIT (one round trip fewer per group, outbox.writer.write_branch)
                kept = later.statements() if later is not None else ()
                self.publisher.stage_many(s, rows, commit=writer is not None, before=kept)
            return results
        except FleetError:
            pass  # one was refused: nothing of this pass was committed; again, one by one
        with begin() as s:
            known = {}
            for i, env in todo:
                try:
                    with s.begin_nested():
                        results[i] = stage(s, env, known)
                except FleetError as exc:
                    results[i] = exc
        return results

    def _envelope(self, r: SendRequest) -> Envelope:
        if r.kind in GATEWAY_KINDS:  # a gateway's own receipts; its peers refuse one from an agent
            raise DeliveryError(
                f"{r.sender}: kind {r.kind} is sent by a gateway only",
                reason=Verification.UNKNOWN_KIND,
                context={"to": r.to},
            )
        trace_id = r.trace_id
        if trace_id is None and r.kind is Kind.ANSWER and r.turn_id is not None:
            trace_id = self._asked_trace(r.sender, r.turn_id)
        return Envelope.new(
            kind=r.kind,
            sender=r.sender,
            to=r.to,
            body=r.body,
            ttl_s=r.ttl_s or self.default_ttl_s,
            trace_id=trace_id,
            turn_id=r.turn_id,
        )

    def _asked_trace(self, answerer: str, turn_id: str) -> str | None:
        """An ANSWER continues its ASK's trace: the ``traceId`` of the ASK of ``turn_id`` held
        for ``answerer`` (None when this host holds none: a new trace)."""
        stmt = (
            select(held_table.c.trace_id)
            .where(held_table.c.recipient == answerer, held_table.c.turn_id == turn_id)
            .where(held_table.c.kind == Kind.ASK.value)
            .limit(1)
        )
        with self.reads() as s:
            found = s.execute(stmt).scalar()
        return str(found) if found else None

    def _stage(
        self,
        s: Session,
        env: Envelope,
        known: dict[str, roster_cache.RosterEntry],
        rows: list[tuple[Envelope, str]] | None = None,
        later: dbapi.Later | None = None,
    ) -> Envelope:
        """Every check and every row of one send, in the caller's transaction; returns the
        envelope as staged (a brief's ``expiresAt`` capped at its inject deadline).

        ``known``: the recipients this transaction resolved already. A group commit of many
        sends to a few recipients reads each one's roster row once (a round trip per send on
        PostgreSQL otherwise); the next transaction reads it again, so a recipient retracted
        between two groups is refused.

        ``rows``: the group's outbox rows, kept for the caller to write together at the end of
        its transaction (:meth:`Publisher.stage_many`: a statement per recipient, not per send;
        one round trip on PostgreSQL); without it the row is written here. ``later``: with
        ``rows``, where the tracking row of a brief is kept to go with them (PostgreSQL)."""
        stage = self.publisher.stage if rows is None else _keep(rows)
        sender, to, kind = env.sender, env.to, env.kind
        senders = self.local_senders
        if senders is not None and sender not in senders.configured:
            senders.check(s, sender)  # a spawned worker: read from the store
        entry = known.get(to)
        if entry is None:
            entry = known[to] = self._resolve(s, to)
        if kind not in TRACKED or entry.delivery != "inject":
            stage(s, env, to_host=entry.host)
        else:  # the inject deadline travels signed as expiresAt
            cap = env.ts_ms + int(self.inject_deadline_s * 1000)
            if env.expires_at_ms > cap:
                env = _expiring(env, cap)
            stage(s, env, to_host=entry.host)
            deadlines.track(
                s,
                FORWARD,
                later,
                msg_id=env.msg_id,
                sender=sender,
                recipient=to,
                host=entry.host,
                trace_id=env.trace_id,
                sent_ms=env.ts_ms,
                deadline_ms=env.expires_at_ms + int(self.clock_skew_s * 1000),
            )
        if kind is Kind.ABANDONED and env.turn_id is not None:
            # the asker gives up its turn in the same transaction as the notice (a refused
            # ABANDONED leaves the turn as it was)
            Conversations.close_turn(s, env.turn_id, ABANDONED)
        elif kind is Kind.ASK and env.turn_id is not None:
            Conversations.open_turn(
                s,
                turn_id=env.turn_id,
                asker=sender,
                asked=to,
                msg_id=env.msg_id,
                expires_at_ms=env.expires_at_ms,
            )
        return env

    def ask(
        self,
        *,
        sender: str,
        to: str,
        body: bytes,
        ttl_s: float = 120.0,
        trace_id: str | None = None,
    ) -> Envelope:
        """A worker asks a main; the turn waits until answered, abandoned or expired."""
        return self.send(
            sender=sender,
            to=to,
            body=body,
            kind=Kind.ASK,
            ttl_s=ttl_s,
            turn_id=uuid.uuid4().hex,
            trace_id=trace_id,
        )

    def answer(
        self,
        *,
        sender: str,
        to: str,
        turn_id: str,
        body: bytes,
        ttl_s: float = 120.0,
        trace_id: str | None = None,
    ) -> Envelope:
        """Answer the ASK of ``turn_id``; the ANSWER continues the ASK's trace (its
        ``traceId``, unless ``trace_id`` is given)."""
        return self.send(sender=sender, to=to, body=body, kind=Kind.ANSWER, ttl_s=ttl_s,
                         turn_id=turn_id, trace_id=trace_id)  # fmt: skip

    def abandon(self, *, sender: str, to: str, turn_id: str) -> Envelope:
        """The asker gives up its turn: a late ANSWER will get TOO_LATE (one transaction: the
        turn closed and the ABANDONED notice queued, see :meth:`_stage`)."""
        return self.send(sender=sender, to=to, body=b"", kind=Kind.ABANDONED, turn_id=turn_id)

    def broadcast(
        self,
        *,
        sender: str,
        group: str,
        body: bytes,
        ttl_s: float | None = None,
        msg_id: str | None = None,
    ) -> int:
        """One record per host with members of ``group`` (key ``broadcast.<group>``).

        Returns the number of hosts. A group with no live member is legal silence (R-TOP-6
        step 6: ``mandatory`` is false only for BROADCAST): nothing is sent, 0 is returned, and
        ``fleet_gateway_empty_broadcasts_total`` counts it. ``msg_id`` (default a fresh one) is
        the broadcast's id on every host, for a caller that correlates its deliveries (the
        chaos workload); reusing one is a replay the recipients drop.
        """
        to = f"broadcast.{group}"
        env = Envelope.new(
            kind=Kind.BROADCAST,
            sender=sender,
            to=to,
            body=body,
            ttl_s=ttl_s or self.default_ttl_s,
            msg_id=msg_id,
        )
        with self.sessions.begin() as s:
            self._check_sender(s, sender)
            hosts = roster_cache.hosts_with_group(s, group, now_ms())
            if not hosts:
                if self.metrics is not None:
                    self.metrics.empty_broadcasts.inc()
                return 0
            for host in sorted(hosts):
                self.publisher.stage(s, env, to_host=host)
        return len(hosts)

    def poll(
        self,
        recipient: str,
        *,
        sender: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 100,
        wait_s: float = 0.0,
        interval_s: float = 0.005,
    ) -> list[HeldMessage]:
        """Drain held messages; with ``wait_s`` this is an open pull (ASKs surface on it)."""
        got = self.held.poll(recipient, sender=sender, kinds=kinds, limit=limit)
        if got or wait_s <= 0:
            return got
        deadline = time.monotonic() + wait_s
        with self.conversations.open_pull(recipient, wait_s):
            while time.monotonic() < deadline:
                got = self.held.poll(recipient, sender=sender, kinds=kinds, limit=limit)
                if got:
                    return got
                time.sleep(interval_s)
        return []


def _expiring(env: Envelope, expires_at_ms: int) -> Envelope:
    """``env`` with another ``expiresAt`` (``dataclasses.replace`` without its field loop)."""
    return Envelope(
        kind=env.kind,
        msg_id=env.msg_id,
        trace_id=env.trace_id,
        sender=env.sender,
        to=env.to,
        ts_ms=env.ts_ms,
        expires_at_ms=expires_at_ms,
        body=env.body,
        turn_id=env.turn_id,
        spawn_id=env.spawn_id,
        v=env.v,
    )


def _keep(rows: list[tuple[Envelope, str]]) -> Callable[..., None]:
    """A stand-in for :meth:`Publisher.stage` that keeps the row for a later ``stage_many``."""

    def stage(_s: Session, env: Envelope, *, to_host: str) -> None:
        rows.append((env, to_host))

    return stage
