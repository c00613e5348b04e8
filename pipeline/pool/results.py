"""Stored step results and the pool's effect log.

- ``fleet_pool_results``: a step's result against its event id (seed 001: "store the result
  against the event id and reuse it"), written in its own short transaction as soon as the step
  ends, so a redelivery -- after a crash, a rebalance or a given-up step -- reuses it and never
  pays for a second model call. Primary key ``(scope, event_id)``: the first result wins.
- ``fleet_pool_effects``: the step's effect, one row per applied record, written in the batch
  transaction together with the runtime's dedupe row. It has NO unique key on the event id on
  purpose: a duplicate effect would be visible here (tests and the lab count them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Integer,
    String,
    Table,
    Text,
    insert,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.store import metadata

results_table = Table(
    "fleet_pool_results",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("event_id", String(255), primary_key=True),
    Column("result", Text, nullable=False),
    Column("member", String(255), nullable=False),
    Column("stored_at_ms", BigInteger, nullable=False, index=True),
)

effects_table = Table(
    "fleet_pool_effects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(255), nullable=False, index=True),
    Column("event_id", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("key", String(255)),
    Column("member", String(255), nullable=False),
    Column("started_ms", BigInteger, nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
    Column("reused", Boolean, nullable=False),
    Column("result", Text, nullable=False),
)


def stored_result(session: Session, scope: str, event_id: str) -> str | None:
    row = session.execute(
        select(results_table.c.result).where(
            results_table.c.scope == scope, results_table.c.event_id == event_id
        )
    ).first()
    return None if row is None else str(row[0])


def store_result(
    sessions: sessionmaker[Session],
    *,
    scope: str,
    event_id: str,
    result: str,
    member: str,
    now_ms: int,
) -> str:
    """Store ``result`` unless one is there already; returns the stored one (first wins)."""
    try:
        with sessions.begin() as session:
            session.execute(
                insert(results_table),
                {
                    "scope": scope,
                    "event_id": event_id,
                    "result": result,
                    "member": member,
                    "stored_at_ms": now_ms,
                },
            )
        return result
    except IntegrityError:
        with sessions() as session:
            return stored_result(session, scope, event_id) or result
