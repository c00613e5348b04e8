"""The write side: ``write`` puts one export intent in the caller's own transaction.

Seed 003: "export intent is written in the same transaction as the state"; "the framework never
calls a broker from the execution path". Nothing here imports a Kafka client, and nothing here
commits: the caller's commit makes state and intent durable together, a rollback drops both.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.errors import ConfigError, DeliveryError
from pipeline.reasons import Outbox
from pipeline.record import Headers
from pipeline.record_headers import pack_headers

from .limits import DEFAULT_MAX_RECORD_BYTES, check_record_size, record_size
from .notify import notify
from .tables import RowStatus, outbox, outbox_branch


def write(
    session: Session,
    *,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None = None,
    branch_key: str,
    tenant: str = "default",
    max_record_bytes: int | None = DEFAULT_MAX_RECORD_BYTES,
) -> int:
    """Queue one Kafka record for the relay, inside the caller's transaction; return its lsn.

    The lsn is the next one of ``(tenant, branch_key)``, starting at 1, without gaps. All records of
    one branch should share ``(topic, key)`` so the broker keeps them on one partition, in order.
    A record above ``max_record_bytes`` (the topic's ``max.message.bytes``; ``None``: no check)
    is refused with ``TOO_LARGE`` before anything is written.
    """
    if not topic or not branch_key or not tenant:
        raise ConfigError("outbox.write needs a topic, a branch_key and a tenant")
    if max_record_bytes is not None:
        size = record_size(
            key=key, value=value, headers=headers, tenant=tenant, branch_key=branch_key, lsn=10**12
        )
        check_record_size(size, max_record_bytes, topic=topic)
    lsn = _next_lsn(session, tenant, branch_key)
    session.execute(
        _INSERT,  # built once: a send is on the hot path (issue 17)
        {
            "tenant": tenant,
            "branch_key": branch_key,
            "lsn": lsn,
            "topic": topic,
            "key": key,
            "value": value,
            "headers": pack_headers(headers) or None,  # NULL: no headers (as since v0.1.0)
            "status": int(RowStatus.PENDING),
            "created_at": time.time(),
        },
    )
    if session.get_bind().dialect.name == "postgresql":
        notify(session)  # a relay in another process wakes at our commit
    return lsn


_INSERT = insert(outbox)
_NEXT_LSN: dict[str, Any] = {}  # dialect name -> the upsert below, built once per dialect


def _next_lsn(session: Session, tenant: str, branch_key: str) -> int:
    # One upsert: the row lock it takes serialises writers of this branch until they commit, so
    # lsns commit in order and never leave a gap (a rolled-back writer rolls its lsn back too).
    dialect = session.get_bind().dialect.name
    stmt = _NEXT_LSN.get(dialect)
    if stmt is None:
        stmt = _NEXT_LSN[dialect] = (
            _insert_for(session)(outbox_branch)
            .values(
                tenant=bindparam("tenant"),
                branch_key=bindparam("branch_key"),
                last_lsn=1,
                abandoned=False,
            )
            .on_conflict_do_update(
                index_elements=[outbox_branch.c.tenant, outbox_branch.c.branch_key],
                set_={"last_lsn": outbox_branch.c.last_lsn + 1},
            )
            .returning(outbox_branch.c.last_lsn, outbox_branch.c.abandoned)
        )
    lsn, abandoned = session.execute(stmt, {"tenant": tenant, "branch_key": branch_key}).one()
    if abandoned:
        raise DeliveryError(
            f"branch {branch_key!r} of tenant {tenant!r} was abandoned; write to the live branch",
            reason=Outbox.BRANCH_ABANDONED,
            context={"tenant": tenant, "branch_key": branch_key},
        )
    return int(lsn)


def abandon_branch(session: Session, *, branch_key: str, tenant: str = "default") -> int:
    """Close a branch in the caller's transaction: its unsent rows are dropped, never published.

    Returns how many rows were dropped. Later writes to the branch fail with ``BRANCH_ABANDONED``.
    """
    session.execute(
        _insert_for(session)(outbox_branch)
        .values(tenant=tenant, branch_key=branch_key, last_lsn=0, abandoned=True)
        .on_conflict_do_update(
            index_elements=[outbox_branch.c.tenant, outbox_branch.c.branch_key],
            set_={"abandoned": True},
        )
    )
    result = session.execute(
        update(outbox)
        .where(
            outbox.c.tenant == tenant,
            outbox.c.branch_key == branch_key,
            outbox.c.status == int(RowStatus.PENDING),
        )
        .values(status=int(RowStatus.DROPPED))
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _insert_for(session: Session) -> Any:
    """The dialect's ``insert`` (both have ``on_conflict_do_update`` and ``returning``)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise ConfigError(f"outbox: unsupported database dialect {dialect!r}")


def branch_positions(session: Session, *, tenant: str | None = None) -> dict[tuple[str, str], int]:
    """``(tenant, branch_key) -> last lsn handed out`` (the next lsn is one more)."""
    stmt = select(outbox_branch.c.tenant, outbox_branch.c.branch_key, outbox_branch.c.last_lsn)
    if tenant is not None:
        stmt = stmt.where(outbox_branch.c.tenant == tenant)
    return {(t, b): int(n) for t, b, n in session.execute(stmt)}
