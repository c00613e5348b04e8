"""The local socket's group commits on both stores: rows, answers, refusals, and on PostgreSQL a
relay in another process woken by every group's commit (the writer holds its connection)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from pipeline.bootstrap.client import build_client
from pipeline.errors import DeliveryError
from pipeline.gateway.socket_server import SocketServer
from pipeline.host import roster_cache
from pipeline.host.socket_client import SocketClient
from pipeline.outbox.notify import listen
from pipeline.outbox.tables import outbox
from pipeline.store import make_engine, serialize_writes, session_factory
from pipeline.testing import one_host

pytestmark = pytest.mark.postgres


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[tuple[SocketServer, Engine]]:
    host = one_host(tmp_path)
    engine = make_engine(store_url)
    if engine.dialect.name == "sqlite":
        serialize_writes(engine)
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [
            roster_cache.RosterEntry("main-b", "B", "main", "pull", (), 10**15),
            roster_cache.RosterEntry("worker-b", "B", "worker", "inject", (), 10**15),
        ])  # fmt: skip
    client = build_client(host.config, signer=host.client.publisher.signer, engine=engine)
    server = SocketServer(path=str(tmp_path / "s.sock"), client=client).start()
    yield server, engine
    server.close()
    engine.dispose()
    host.engine.dispose()


def _rows(engine: Engine) -> int:
    with engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(outbox)).scalar_one())


def test_groups_commit_their_rows_and_answer_each_send(served: Any) -> None:
    server, engine = served
    with SocketClient.connect(server.path) as c:
        one = c.send(sender="main-a", to="main-b", body=b"x")
        results = c.send_many([
            {"sender": "main-a", "to": "worker-b", "body": b"brief", "kind": "SEND"},
            {"sender": "main-a", "to": "nobody", "body": b"x"},
            {"sender": "main-a", "to": "main-b", "body": b"y", "kind": "REPLY"},
        ])  # fmt: skip
    assert isinstance(results[1], DeliveryError) and results[1].reason == "UNKNOWN_RECIPIENT"
    ids = {one.msg_id, results[0].msg_id, results[2].msg_id}  # type: ignore[union-attr]
    assert len(ids) == 3 == _rows(engine)


def test_every_groups_commit_wakes_a_listening_relay_on_postgresql(served: Any) -> None:
    server, engine = served
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no channel: the gateway wakes its own relay")
    stop, woken = threading.Event(), threading.Event()
    thread = listen(engine, woken.set, stop)
    try:
        assert woken.wait(30)  # listening
        with SocketClient.connect(server.path) as c:
            for i in range(3):  # one group each: the next send waits for this one's answer
                woken.clear()
                c.send(sender="main-a", to="main-b", body=f"m{i}".encode())
                assert woken.wait(30), f"group {i} did not wake the relay"
    finally:
        stop.set()
        assert thread is not None
        thread.join(10)
    assert _rows(engine) == 3
