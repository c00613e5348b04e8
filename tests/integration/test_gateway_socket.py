"""``fleet send`` through the gateway's local socket, on a real broker, gateways as processes.

Local tools hand their sends to the running gateway (the store's one writer); when the
gateway is down ``fleet send`` still succeeds by writing the store directly (R-OUT-1: "the
framework never calls a broker from the execution path" -- a send is an outbox row either way).
R-ACK-2, pull path: a REPLY is held at the recipient's host exactly once. R-CONV-1: an
ASK and its abandon through the socket open and close the turn at the asker's host, and the
asked side is told ABANDONED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.chaos.gateway_process import GatewayProc as GatewayProcess
from pipeline.host.held import held_table
from pipeline.store import make_engine
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka

MAIN = '[[entities]]\ngid = "{gid}"\nrole = "main"\ndelivery = "pull"\n'


def _fleet(*args: str) -> dict[str, Any]:
    """One ``fleet`` process (the console script's entry: the lean path while A's gateway serves
    its socket, the Typer command otherwise) and its ``--json`` result."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args, "--json"],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


def _fleet_list(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args, "--json"],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout))


def _fleet_send(config: Path, body: str) -> dict[str, Any]:
    return _fleet("send", "-c", str(config), "--from", "main-a", "--to", "main-b", "--kind",
                  "REPLY", body)  # fmt: skip


def _held_kinds(store: str, turn_id: str) -> list[str]:
    engine = make_engine(store, create=False)
    try:
        with engine.connect() as c:
            rows = c.execute(
                select(held_table.c.kind).where(
                    held_table.c.recipient == "main-b", held_table.c.turn_id == turn_id
                )
            )
            return sorted(r.kind for r in rows)
    finally:
        engine.dispose()


def _turn_state(store: str, turn_id: str) -> str | None:
    engine = make_engine(store, create=False)
    try:
        with engine.connect() as c:
            rows = c.exec_driver_sql("SELECT state FROM fleet_turns WHERE turn_id = ?", (turn_id,))
            state = rows.scalar_one_or_none()
            return None if state is None else str(state)
    finally:
        engine.dispose()


def _held_ids(store: str, msg_id: str) -> list[str]:
    engine = make_engine(store, create=False)
    try:
        with engine.connect() as c:
            rows = c.execute(
                select(held_table.c.msg_id).where(
                    held_table.c.recipient == "main-b", held_table.c.msg_id == msg_id
                )
            )
            return [r.msg_id for r in rows]
    finally:
        engine.dispose()


def test_a_send_through_the_socket_is_held_once_and_with_the_gateway_down_goes_direct(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    store_a, store_b = (f"sqlite:///{tmp_path / (h + '.sqlite')}" for h in ("A", "B"))
    sock = tmp_path / "A.sqlite.sock"
    config_a = fleet.config_file("A", MAIN.format(gid="main-a"))
    config_b = fleet.config_file("B", MAIN.format(gid="main-b"))
    a = GatewayProcess(config_a, tmp_path / "A.log").start()
    b = GatewayProcess(config_b, tmp_path / "B.log").start()
    try:
        wait_until(sock.exists, timeout_s=120, what="A's local socket")
        wait_until(
            lambda: _fleet_send_ready(store_a),
            timeout_s=120,
            what="host A to know main-b",
            interval_s=0.2,
        )
        via_socket = _fleet_send(config_a, "through the gateway")
        assert via_socket["via"] == "gateway", via_socket
        wait_until(lambda: _held_ids(store_b, via_socket["msgId"]), timeout_s=60, what="held at B")
        # exactly once: a second look after more relay passes still finds one row
        time.sleep(2.0)
        assert _held_ids(store_b, via_socket["msgId"]) == [via_socket["msgId"]]

        # R-CONV-2 through the socket: an ASK opens the turn at A, an abandon closes it
        # there and B is told ABANDONED
        asked = _fleet("ask", "-c", str(config_a), "--from", "main-a", "--to", "main-b", "?")
        turn = asked["turnId"]
        assert _turn_state(store_a, turn) is not None  # waiting (or closed by a NO_WAITER)
        _fleet("abandon", "-c", str(config_a), "--from", "main-a", "--to", "main-b", "--turn", turn)
        assert _turn_state(store_a, turn) == "abandoned"
        wait_until(
            lambda: "ABANDONED" in _held_kinds(store_b, turn),
            timeout_s=60,
            what="ABANDONED held at B",
        )
        # main-b drains them through B's gateway (its socket), once
        polled = _fleet_list("poll", "-c", str(config_b), "--as", "main-b")
        assert via_socket["msgId"] in {m["msgId"] for m in polled}, polled
        assert "ABANDONED" in {m["kind"] for m in polled}
        assert _fleet_list("poll", "-c", str(config_b), "--as", "main-b") == []

        assert a.stop() == 0, a.output()
        assert not sock.exists()  # the gateway removed its socket on the way out
        direct = _fleet_send(config_a, "while the gateway is down")
        assert direct["via"] == "store", direct
        a.start()  # its relay ships what fleet send left in the outbox
        wait_until(
            lambda: _held_ids(store_b, direct["msgId"]),
            timeout_s=120,
            what="the direct send held at B",
        )
        time.sleep(2.0)
        assert _held_ids(store_b, direct["msgId"]) == [direct["msgId"]]
    finally:
        a.stop()
        b.stop()


def _fleet_send_ready(store_a: str) -> bool:
    from pipeline.host import roster_cache
    from pipeline.store import read_sessions

    engine = make_engine(store_a, create=False)
    try:
        with read_sessions(engine)() as s:
            return roster_cache.lookup(s, "main-b") is not None
    except Exception:  # noqa: BLE001 - the store is still being created
        return False
    finally:
        engine.dispose()
