"""Value objects and small helpers shared by the quarantine store and its release operations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, event
from sqlalchemy.orm import Session

from pipeline.record import Record

PENDING, DONE, FAILED = "PENDING", "DONE", "FAILED"


@dataclass(frozen=True)
class Scope:
    """Where quarantine state belongs: a consumer group reading a topic (not a process)."""

    group: str
    topic: str


@dataclass(frozen=True, kw_only=True)
class QuarantineEntry:
    scope: Scope
    key: str
    src_topic: str  # the topic the key's records come from
    partition: int
    reason: str
    dead_letter_ref: str
    quarantined_ms: int
    parked: int  # records waiting behind the dead letter (the dead letter itself not counted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.scope.group,
            "topic": self.scope.topic,
            "key": self.key,
            "src_topic": self.src_topic,
            "partition": self.partition,
            "reason": self.reason,
            "dead_letter_ref": self.dead_letter_ref,
            "quarantined_ms": self.quarantined_ms,
            "parked": self.parked,
        }


@dataclass(frozen=True, kw_only=True)
class ParkedRecord:
    seq: int  # per-key order; the dead-lettered record comes first
    dead_letter: bool
    record: Record


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    id: int
    scope: Scope
    key: str
    src_topic: str | None  # with partition: whose owner executes it (None: not quarantined)
    partition: int | None
    state: str  # PENDING | DONE | FAILED
    requested_ms: int
    completed_ms: int | None
    note: str


def where_scope(table: Table, scope: Scope, key: str | None = None) -> ColumnElement[bool]:
    conds = [table.c.grp == scope.group, table.c.topic == scope.topic]
    if key is not None:
        conds.append(table.c.key == key)
    return and_(*conds)


def on_commit(session: Session, action: Callable[[], None]) -> None:
    """Run ``action`` after the caller's transaction commits; forget it if the transaction (or
    the savepoint it was registered in) rolls back.

    This is how the in-memory ``is_quarantined`` cache follows writes made inside a transaction
    we do not own: it changes only once the change is durable.
    """
    if not session.info.get("fleet_hooked"):
        session.info["fleet_hooked"] = True
        event.listen(session, "after_commit", _run_pending)
        event.listen(session, "after_soft_rollback", _drop_rolled_back)
    txn = session.get_nested_transaction() or session.get_transaction()
    session.info.setdefault("fleet_on_commit", []).append((txn, action))


def _run_pending(session: Session) -> None:
    if session.get_nested_transaction() is not None:
        return  # a savepoint was released: nothing is durable until the outer commit
    for _txn, act in session.info.pop("fleet_on_commit", []):
        act()


def _drop_rolled_back(session: Session, rolled_back: Any) -> None:
    def inside(txn: Any) -> bool:
        while txn is not None:
            if txn is rolled_back:
                return True
            txn = txn.parent
        return False

    pending = session.info.get("fleet_on_commit", [])
    session.info["fleet_on_commit"] = [(t, a) for t, a in pending if not inside(t)]
