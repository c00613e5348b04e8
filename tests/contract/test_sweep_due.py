"""The control sweep's look-first (pipeline/control/sweep_due.py) says a duty has work exactly
when the reaper, the late-mail drop or the stalled-STOP retry would find a row: a ``live``
worker, mail held undrained for a ``reaped`` one, a STOP still ``stopping`` -- and nothing for
finished rows, drained mail, or mail for a worker still live (docs/lifecycle.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, update

from pipeline.control import spawns, stops
from pipeline.control.sweep_due import SweepDue, sweep_due
from pipeline.host.held import held_table

NOW = 1_000_000


def _due(sessions: Any) -> SweepDue:
    with sessions() as s:
        return sweep_due(s)


def test_due_exactly_when_a_sweep_duty_has_rows(sessions: Any) -> None:
    assert not _due(sessions).any()
    with sessions.begin() as s:  # finished rows, and mail for a worker still live: not late
        s.execute(insert(spawns.spawns_table), _spawn("w-done", spawns.FAILED))
        stops.add(s, **_stop("s-done", stops.DONE))
        s.execute(insert(held_table), _held("w-1", "m-1"))
    assert not _due(sessions).any()
    with sessions.begin() as s:
        s.execute(insert(spawns.spawns_table), _spawn("w-1", spawns.LIVE))
    assert _due(sessions) == SweepDue(live=True, stopping=False, held_for_gone=False)
    with sessions.begin() as s:  # reaped with its mail undrained; a STOP still stopping
        s.execute(update(spawns.spawns_table).values(state=spawns.REAPED))
        stops.add(s, **_stop("s-1", stops.STOPPING))
    assert _due(sessions) == SweepDue(live=False, stopping=True, held_for_gone=True)
    with sessions.begin() as s:
        s.execute(update(held_table).values(drained_at_ms=NOW))
        s.execute(update(stops.stops_table).values(state=stops.DONE))
    assert not _due(sessions).any()


def _spawn(gid: str, state: str) -> dict[str, Any]:
    return {
        "spawn_id": gid,
        "request_msg_id": f"req-{gid}",
        "requester": "main-a",
        "requester_host": "A",
        "profile": "p",
        "state": state,
        "created_ms": NOW - 10,
    }


def _stop(stop_id: str, state: str) -> dict[str, Any]:
    return {
        "stop_id": stop_id,
        "gid": "w-1",
        "request_msg_id": f"req-{stop_id}",
        "requester": "main-a",
        "requester_host": "A",
        "trace_id": "t",
        "state": state,
        "created_ms": NOW - 10,
    }


def _held(recipient: str, msg_id: str) -> dict[str, Any]:
    return {
        "recipient": recipient,
        "msg_id": msg_id,
        "kind": "REPLY",
        "sender": "main-a",
        "body": b"x",
        "ts_ms": NOW - 10,
        "expires_at_ms": NOW + 60_000,
        "held_at_ms": NOW - 10,
    }
