"""Deliver outbox rows straight to handlers, in process: the saga engine without a broker.

For tests and ``fleet``-less demos that want the real orchestrator, participants, idempotency and
outbox on real SQL but no Kafka: each pending outbox row of a known topic is marked sent (its
branch's watermark raised past it, as the relay acks) and handed to its handler, and the handler's staged writes commit in the same transaction (a relay and a
consumer collapsed into one step). Production runs the relay and ConsumerRuntime instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.outbox import RowStatus, outbox, outbox_branch, outbox_sent
from pipeline.outbox.sent import is_pending
from pipeline.record import Record
from pipeline.record_headers import unpack_headers
from pipeline.runtime.ports import Handler
from pipeline.runtime.staging import Staged


def drain(
    sessions: sessionmaker[Session], handlers: Mapping[str, Handler], *, limit: int = 10_000
) -> int:
    """Deliver pending rows in id order until none is left (or ``limit``); return how many."""
    delivered = 0
    topics = list(handlers)
    while delivered < limit:
        with sessions.begin() as session:
            row = session.execute(
                select(outbox)
                .where(is_pending(), outbox.c.topic.in_(topics))
                .order_by(outbox.c.id)
                .limit(1)
            ).first()
            if row is None:
                return delivered
            session.execute(
                update(outbox)
                .where(outbox.c.id == row.id)
                .values(status=int(RowStatus.SENT), sent_at=time.time())
            )
            raised = session.execute(
                update(outbox_sent)
                .where(
                    outbox_sent.c.tenant == row.tenant,
                    outbox_sent.c.branch_key == row.branch_key,
                    outbox_sent.c.sent_lsn == row.lsn - 1,  # a prefix, as the relay acks
                )
                .values(sent_lsn=row.lsn)
            )
            if getattr(raised, "rowcount", 0):  # its last row sent: idle, as the relay marks it
                session.execute(
                    update(outbox_branch)
                    .where(
                        outbox_branch.c.tenant == row.tenant,
                        outbox_branch.c.branch_key == row.branch_key,
                        outbox_branch.c.last_lsn == row.lsn,
                    )
                    .values(idle_lsn=row.lsn, active=False)
                )
            rec = Record(
                topic=row.topic,
                partition=0,
                offset=int(row.id),
                key=row.key,
                value=row.value,
                headers=tuple(unpack_headers(row.headers)),
                timestamp_ms=int(row.created_at * 1000),
            )
            tx = Staged()
            handlers[row.topic].handle(rec, tx)
            tx.flush(session)
        delivered += 1
    return delivered
