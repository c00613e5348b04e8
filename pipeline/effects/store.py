"""Idempotency keys with stored results (R-EFF-2).

"Reserve it atomically (a unique constraint) and write it in the same transaction as the effect."
Every method takes the caller's :class:`Session` and never commits:

* ``reserve`` inserts the ``(key_class, key)`` row (``ON CONFLICT DO NOTHING``). Inserted: the
  caller has it (:class:`FirstUse`). Not inserted: the row answers -- :class:`Done` with the stored
  result, :class:`InProgress` (409), or :class:`Mismatch` (422). On PostgreSQL a concurrent insert
  of the same key waits for the other transaction, then sees its committed row; SQLite serialises
  writers (``BEGIN IMMEDIATE``). Either way exactly one caller gets ``FirstUse``.
* ``complete`` / ``fail`` store the outcome in the caller's transaction, the one with the effect:
  a crash before commit leaves neither (the retry acts once, for the first time); after it, both
  (the retry gets ``Done``).
* An expired key (past its class's retention) starts a new request, as Stripe documents; an
  in-progress row whose lease ran out may be taken over (the holder is presumed dead).

Two ways to use it: one transaction (reserve, effect, complete, commit) -- concurrent callers wait
on the row and then see ``Done``; or reserve-and-commit first, then a slow external effect that is
handed the key, then complete -- concurrent callers see ``InProgress`` meanwhile.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.effects.key_classes import KeyClass, class_map
from pipeline.errors import ConfigError, StoreError
from pipeline.reasons import Idempotency

from .keys import check_key, payload_hash
from .metrics import IdempotencyMetrics, ReserveOutcome
from .reservation import Done, FirstUse, InProgress, Mismatch, Reservation, StoredError
from .tables import KeyState, expired, idempotency

Clock = Callable[[], float]
# The caller's transaction: an ORM ``Session`` or a Core ``Connection`` (a pool member's claims
# use plain connections: no ORM unit of work around two statements).
Tx = Session | Connection


@dataclass(frozen=True, kw_only=True)
class KeyRecord:
    """One stored key, for inspection (``fleet idem ls | show``)."""

    key_class: str
    key: str
    state: KeyState
    payload_hash: str
    result: Any
    attempt: int
    created_at_ms: int
    completed_at_ms: int | None
    lease_until_ms: int
    expires_at_ms: int | None


class IdempotencyStore:
    """Reserve, complete and fail keys of the declared :class:`KeyClass` es (see module doc)."""

    def __init__(
        self,
        classes: Iterable[KeyClass],
        *,
        clock: Clock = time.time,
        metrics: IdempotencyMetrics | None = None,
    ) -> None:
        self.classes = class_map(classes)
        self.clock = clock
        self.metrics = metrics

    def key_class(self, name: str) -> KeyClass:
        kc = self.classes.get(name)
        if kc is None:
            raise ConfigError(
                f"unknown idempotency key class {name!r}; declared: {sorted(self.classes)}",
                reason=Idempotency.IDEM_UNKNOWN_KEY_CLASS,
            )
        return kc

    # -- reserve ------------------------------------------------------------------------------
    def reserve(self, session: Tx, key: str, payload: Any, *, key_class: str) -> Reservation:
        kc = self.key_class(key_class)
        check_key(key)
        digest = payload_hash(payload)
        now = self._now_ms()
        values = self._fresh(kc, digest, now)
        inserted = session.execute(
            _reserve_for(session), {"key_class": kc.name, "idem_key": key, **values}
        )
        if inserted.first() is not None:
            return self._count(kc, ReserveOutcome.FIRST_USE, FirstUse(key=key))
        row = self._row(session, kc.name, key)
        if row is None:  # deleted (released/purged) between our insert and read: try once more
            return self.reserve(session, key, payload, key_class=key_class)
        expired = row.expires_at_ms is not None and row.expires_at_ms <= now
        stale = row.state == KeyState.IN_PROGRESS and row.lease_until_ms <= now
        if expired or (stale and row.payload_hash == digest):
            taken = self._take_over(session, kc, key, digest, now, expired=expired, row=row)
            if taken is not None:
                outcome = (
                    ReserveOutcome.EXPIRED_RESTART if expired else ReserveOutcome.LEASE_TAKEOVER
                )
                return self._count(kc, outcome, taken)
            row = self._row(session, kc.name, key)
            if row is None:
                return self.reserve(session, key, payload, key_class=key_class)
        if row.payload_hash != digest:
            answer: Reservation = Mismatch(
                key=key, stored_hash=row.payload_hash, payload_hash=digest
            )
            return self._count(kc, ReserveOutcome.MISMATCH, answer)
        if row.state == KeyState.IN_PROGRESS:
            answer = InProgress(
                key=key, since_ms=int(row.created_at_ms), lease_until_ms=int(row.lease_until_ms)
            )
            return self._count(kc, ReserveOutcome.IN_PROGRESS, answer)
        return self._count(kc, ReserveOutcome.DONE, _done(key, row))

    def _take_over(
        self,
        session: Tx,
        kc: KeyClass,
        key: str,
        digest: str,
        now: int,
        *,
        expired: bool,
        row: Row[Any],
    ) -> FirstUse | None:
        # Conditional on what we read: of two callers racing for one expired/stale row, the
        # second one's UPDATE matches nothing (it re-reads the row the first one wrote).
        cond = (
            idempotency.c.expires_at_ms <= now
            if expired
            else and_(
                idempotency.c.state == int(KeyState.IN_PROGRESS),
                idempotency.c.lease_until_ms <= now,
                idempotency.c.attempt == row.attempt,
            )
        )
        attempt = int(row.attempt) + 1
        values = self._fresh(kc, digest, now) | {"attempt": attempt}
        result = session.execute(
            update(idempotency)
            .where(idempotency.c.key_class == kc.name, idempotency.c.idem_key == key, cond)
            .values(**values)
        )
        if int(getattr(result, "rowcount", 0) or 0) != 1:
            return None
        return FirstUse(key=key, attempt=attempt, restarted=True)

    def _fresh(self, kc: KeyClass, digest: str, now: int) -> dict[str, Any]:
        expires = None if kc.retention_s is None else now + int(kc.retention_s * 1000)
        return {
            "payload_hash": digest,
            "state": int(KeyState.IN_PROGRESS),
            "result": None,
            "attempt": 1,
            "created_at_ms": now,
            "completed_at_ms": None,
            "lease_until_ms": now + int(kc.lease_s * 1000),
            "expires_at_ms": expires,
        }

    # -- complete / fail / release ------------------------------------------------------------
    def complete(
        self,
        session: Tx,
        key: str,
        result: Any,
        *,
        key_class: str,
        attempt: int | None = None,
    ) -> None:
        """Store ``result`` (JSON-serialisable) in the caller's transaction, with the effect.

        ``attempt`` (the :class:`FirstUse` one): refuse unless the caller still holds that
        attempt, so a holder whose lease was taken over never overwrites the new holder."""
        self._finish(session, key, key_class, KeyState.SUCCEEDED, {"value": result}, attempt)

    def fail(
        self,
        session: Tx,
        key: str,
        error: StoredError,
        *,
        key_class: str,
        attempt: int | None = None,
    ) -> None:
        """Store a failure: every retry with this key gets it back as ``Done(error=...)``."""
        body = {"error": {"reason": error.reason, "message": error.message}}
        self._finish(session, key, key_class, KeyState.FAILED, body, attempt)

    def renew(self, session: Tx, key: str, *, key_class: str, attempt: int) -> bool:
        """Extend an in-progress key's lease by its class's ``lease_s`` (a heartbeat from a
        holder whose work is still running). False: the key is no longer held at ``attempt``
        (completed, released, or taken over after the lease ran out)."""
        kc = self.key_class(key_class)
        result = session.execute(
            _RENEW,
            {
                "k_class": kc.name,
                "k_key": key,
                "k_state": int(KeyState.IN_PROGRESS),
                "k_attempt": attempt,
                "new_lease": self._now_ms() + int(kc.lease_s * 1000),
            },
        )
        return int(getattr(result, "rowcount", 0) or 0) == 1

    def _finish(
        self,
        session: Tx,
        key: str,
        key_class: str,
        state: KeyState,
        body: dict[str, Any],
        attempt: int | None,
    ) -> None:
        kc = self.key_class(key_class)
        result = session.execute(
            _FINISH if attempt is None else _FINISH_ATTEMPT,
            {
                **_held(kc.name, key, attempt),
                "new_state": int(state),
                "new_result": json.dumps(body),
                "done_ms": self._now_ms(),
            },
        )
        if int(getattr(result, "rowcount", 0) or 0) != 1:
            raise StoreError(
                f"idempotency key {key!r} ({kc.name}) is not held in progress: reserve it first "
                "(or its lease ran out and another caller took it over)",
                reason=Idempotency.IDEM_NOT_RESERVED,
                retriable=False,
            )

    def release(self, session: Tx, key: str, *, key_class: str, attempt: int | None = None) -> None:
        """Forget an in-progress key whose work never began (validation failed) or failed in a
        way the caller retries itself: the next ``reserve`` is a first use again."""
        kc = self.key_class(key_class)
        session.execute(
            _RELEASE if attempt is None else _RELEASE_ATTEMPT, _held(kc.name, key, attempt)
        )

    def purge_expired(self, session: Session) -> int:
        """Delete keys past their retention (they would start a new request anyway)."""
        result = session.execute(delete(idempotency).where(expired(self._now_ms())))
        return int(getattr(result, "rowcount", 0) or 0)

    # -- reads --------------------------------------------------------------------------------
    def get(self, session: Session, key: str, *, key_class: str) -> KeyRecord | None:
        row = self._row(session, key_class, key)
        return None if row is None else _record(row)

    def _row(self, session: Tx, key_class: str, key: str) -> Row[Any] | None:
        return session.execute(_ROW, {"k_class": key_class, "k_key": key}).first()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _count(self, kc: KeyClass, outcome: ReserveOutcome, answer: Reservation) -> Reservation:
        if self.metrics is not None:
            self.metrics.reservations.labels(kc.name, outcome.value).inc()
        return answer


def list_keys(
    session: Session,
    *,
    key_class: str | None = None,
    state: KeyState | None = None,
    limit: int = 100,
) -> list[KeyRecord]:
    stmt = select(idempotency)
    if key_class is not None:
        stmt = stmt.where(idempotency.c.key_class == key_class)
    if state is not None:
        stmt = stmt.where(idempotency.c.state == int(state))
    stmt = stmt.order_by(idempotency.c.created_at_ms.desc()).limit(limit)
    return [_record(r) for r in session.execute(stmt)]


def find_key(session: Session, key: str, *, key_class: str | None = None) -> list[KeyRecord]:
    """Every class's record of ``key`` (or just ``key_class``'s)."""
    stmt = select(idempotency).where(idempotency.c.idem_key == key)
    if key_class is not None:
        stmt = stmt.where(idempotency.c.key_class == key_class)
    return [_record(r) for r in session.execute(stmt.order_by(idempotency.c.key_class))]


def count_in_progress(session: Session) -> int:
    from sqlalchemy import func

    stmt = select(func.count()).where(idempotency.c.state == int(KeyState.IN_PROGRESS))
    return int(session.execute(stmt).scalar_one())


def _done(key: str, row: Row[Any]) -> Done:
    body = json.loads(row.result) if row.result else {}
    if row.state == KeyState.FAILED:
        err = body.get("error") or {}
        return Done(
            key=key,
            error=StoredError(
                reason=str(err.get("reason", "")), message=str(err.get("message", ""))
            ),
        )
    return Done(key=key, value=body.get("value"))


def _record(row: Row[Any]) -> KeyRecord:
    return KeyRecord(
        key_class=row.key_class,
        key=row.idem_key,
        state=KeyState(row.state),
        payload_hash=row.payload_hash,
        result=json.loads(row.result) if row.result else None,
        attempt=int(row.attempt),
        created_at_ms=int(row.created_at_ms),
        completed_at_ms=None if row.completed_at_ms is None else int(row.completed_at_ms),
        lease_until_ms=int(row.lease_until_ms),
        expires_at_ms=None if row.expires_at_ms is None else int(row.expires_at_ms),
    )


# The statements every reserve / complete / renew / release runs, built once with bound
# parameters: SQLAlchemy then compiles each once and finds it by a memoised cache key, instead
# of building a new statement (and its cache key) per call -- most of a pool step's store CPU.
_RESERVE = {
    "postgresql": postgresql.insert(idempotency)
    .on_conflict_do_nothing()
    .returning(idempotency.c.idem_key),
    "sqlite": sqlite.insert(idempotency).on_conflict_do_nothing().returning(idempotency.c.idem_key),
}
_KEY = (
    idempotency.c.key_class == bindparam("k_class"),
    idempotency.c.idem_key == bindparam("k_key"),
)
_HELD = (*_KEY, idempotency.c.state == bindparam("k_state"))
_HELD_ATTEMPT = (*_HELD, idempotency.c.attempt == bindparam("k_attempt"))
_ROW = select(idempotency).where(*_KEY)
_FINISH_VALUES: dict[str, Any] = {
    "state": bindparam("new_state"),
    "result": bindparam("new_result"),
    "completed_at_ms": bindparam("done_ms"),
}
_FINISH = update(idempotency).where(*_HELD).values(**_FINISH_VALUES)
_FINISH_ATTEMPT = update(idempotency).where(*_HELD_ATTEMPT).values(**_FINISH_VALUES)
_RENEW = update(idempotency).where(*_HELD_ATTEMPT).values(lease_until_ms=bindparam("new_lease"))
_RELEASE = delete(idempotency).where(*_HELD)
_RELEASE_ATTEMPT = delete(idempotency).where(*_HELD_ATTEMPT)


def _held(key_class: str, key: str, attempt: int | None) -> dict[str, Any]:
    """Parameters of ``_HELD`` (and ``_HELD_ATTEMPT``): the key, in progress, at ``attempt``."""
    params: dict[str, Any] = {
        "k_class": key_class,
        "k_key": key,
        "k_state": int(KeyState.IN_PROGRESS),
    }
    if attempt is not None:
        params["k_attempt"] = attempt
    return params


def _reserve_for(session: Tx) -> Any:
    bind = session if isinstance(session, Connection) else session.get_bind()
    dialect = bind.dialect.name
    stmt = _RESERVE.get(dialect)
    if stmt is None:
        raise ConfigError(f"idempotency: unsupported database dialect {dialect!r}")
    return stmt
