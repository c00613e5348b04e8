"""Maintenance's look-first (pipeline/host/due.py) says "due" exactly when the duty it guards
has work: a tracked send pending past its deadline, a turn waiting past its expiry, an undrained
held message past its ``expiresAt`` -- and not for one answered, drained or not yet due."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, update

from pipeline.host import due
from pipeline.host.conversations import ANSWERED, WAITING, turns_table
from pipeline.host.deadlines import PENDING
from pipeline.host.held import held_table
from pipeline.host.tracking import INJECTED, forward_table

NOW = 1_000_000


def _checks(sessions: Any) -> tuple[bool, bool, bool]:
    """Each duty's own question; the tick's one-statement form (``due_now``) must agree."""
    with sessions() as s:
        each = (
            due.overdue(s, forward_table, PENDING, NOW),
            due.turn_expired(s, NOW),
            due.held_expired(s, NOW),
        )
        at_once = due.due_now(s, (forward_table,), PENDING, NOW)
    assert (forward_table in at_once.overdue, at_once.turns, at_once.held) == each
    return each


def test_due_exactly_when_a_duty_has_work(sessions: Any) -> None:
    assert _checks(sessions) == (False, False, False)
    with sessions.begin() as s:  # rows not yet due
        s.execute(insert(forward_table), _forward("f-later", NOW + 1))
        s.execute(insert(turns_table), _turn("t-later", NOW + 1))
        s.execute(insert(held_table), _held("h-later", NOW + 1))
    assert _checks(sessions) == (False, False, False)
    with sessions.begin() as s:  # due, then answered / drained: no work left
        s.execute(insert(forward_table), _forward("f-due", NOW - 1))
        s.execute(insert(turns_table), _turn("t-due", NOW - 1))
        s.execute(insert(held_table), _held("h-due", NOW - 1))
    assert _checks(sessions) == (True, True, True)
    with sessions.begin() as s:
        s.execute(update(forward_table).values(state=INJECTED))
        s.execute(update(turns_table).values(state=ANSWERED))
        s.execute(update(held_table).values(drained_at_ms=NOW))
    assert _checks(sessions) == (False, False, False)


def _forward(msg_id: str, deadline_ms: int) -> dict[str, Any]:
    return {
        "msg_id": msg_id,
        "sender": "main-a",
        "recipient": "w-1",
        "trace_id": "t",
        "sent_ms": NOW - 10,
        "deadline_ms": deadline_ms,
        "state": PENDING,
    }


def _turn(turn_id: str, expires_at_ms: int) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "asker": "main-a",
        "asked": "w-1",
        "ask_msg_id": f"ask-{turn_id}",
        "opened_ms": NOW - 10,
        "expires_at_ms": expires_at_ms,
        "state": WAITING,
    }


def _held(msg_id: str, expires_at_ms: int) -> dict[str, Any]:
    return {
        "recipient": "main-b",
        "msg_id": msg_id,
        "kind": "REPLY",
        "sender": "main-a",
        "body": b"x",
        "ts_ms": NOW - 10,
        "expires_at_ms": expires_at_ms,
        "held_at_ms": NOW - 10,
    }
