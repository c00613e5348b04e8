"""Sender side of the forward path: every brief sent to an inject-mode recipient is tracked.

The row is written in the same transaction as the send's outbox row. ``INJECTED`` (correlated by
msgId) settles it; a row still pending at its deadline becomes exactly one ``FAILED``
(``INJECT_TIMEOUT``) in the sender's own pull store (R-ACK-5: "no INJECTED within a bound =
fast explicit failure"). The tracker itself is :mod:`pipeline.host.deadlines`, shared with
SPAWN requests; this module is the table and its :data:`FORWARD` kind.
"""

from __future__ import annotations

from sqlalchemy import Column, String, Table

from pipeline.host.deadlines import FAILED, PENDING, Tracked, tracked_columns
from pipeline.reasons import Inject
from pipeline.store import metadata

forward_table = Table(
    "fleet_forward_sends",
    metadata,
    Column("msg_id", String(255), primary_key=True),
    Column("sender", String(255), nullable=False),
    Column("recipient", String(255), nullable=False),
    *tracked_columns(),  # state: pending | injected | failed
    # the host the brief went to: only its gateway's INJECTED settles the row (NULL: written
    # before 0.13, any gateway's). After the tracker's columns: added by a later revision.
    Column("host", String(255), nullable=True),
)

INJECTED = "injected"

FORWARD = Tracked(
    name="inject",
    table=forward_table,
    owner="sender",
    about="recipient",
    answered=INJECTED,
    reason=Inject.INJECT_TIMEOUT,
    stage="timeout",
    describe=lambda row: f"no INJECTED from {row.recipient} within the deadline",
)

__all__ = ["FAILED", "FORWARD", "INJECTED", "PENDING", "forward_table"]
