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
from pipeline.envelope import Kind
from pipeline.errors import DeliveryError
from pipeline.gateway.client import SendRequest
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


@pytest.mark.parametrize("as_the_gateway", [False, True], ids=["own-writer", "gateway-writer"])
def test_a_group_writes_each_recipient_s_rows_together_and_refuses_only_an_abandoned_one(
    served: Any, monkeypatch: pytest.MonkeyPatch, as_the_gateway: bool
) -> None:
    """R-OUT-3 and R-OUT-1: a group's sends to one recipient take their branch's lsns in send
    order in one statement (no ``write`` per send: on PostgreSQL one round trip for the group's
    rows); a send to a branch that was abandoned is refused ``BRANCH_ABANDONED`` and the rest of
    the group is written all the same (the group again, one send at a time), once.
    ``gateway-writer``: the socket's held writer on a store whose relay is woken in process, as
    in the gateway; on PostgreSQL the group's last rows then carry its ``COMMIT``, and the
    abandoned branch (written last) must fail that statement so nothing of the group commits.
    R-ACK-5: a brief's tracking row (its ``INJECT_TIMEOUT`` deadline) is written in its send's
    transaction, once; on PostgreSQL it goes in the rows' round trip, not one of its own."""
    from pipeline.gateway.writer_session import WriterSession
    from pipeline.outbox import writer
    from pipeline.outbox.notify import woken_in_process
    from pipeline.outbox.writer import abandon_branch

    server, engine = served
    client = server.client
    held = WriterSession(client.sessions) if as_the_gateway else None
    from pipeline.store import pg_pipeline

    carried: list[object] = []  # PostgreSQL: what went with the rows' statement
    ahead: list[int] = []  # ... and how many writes went ahead of it (the tracking rows)
    real_rows = pg_pipeline.all_rows

    def all_rows(*a: Any, **k: Any) -> Any:
        carried.append(k.get("then"))
        ahead.append(sum(len(rows) for _, rows in k.get("before", ())))
        return real_rows(*a, **k)

    monkeypatch.setattr(pg_pipeline, "all_rows", all_rows)
    if as_the_gateway:
        woken_in_process(engine)
        real_send_all = client.send_all
        monkeypatch.setattr(client, "send_all", lambda reqs: real_send_all(reqs, writer=held))
    each: list[str] = []
    together: list[int] = []
    real_write, real_branch = writer.write, writer.write_branch
    monkeypatch.setattr(
        writer, "write", lambda *a, **k: each.append(k["branch_key"]) or real_write(*a, **k)
    )
    monkeypatch.setattr("pipeline.host.outbound.write_branch",
                        lambda s, r, **k: together.append(len(r)) or real_branch(s, r, **k))  # fmt: skip
    envs = client.send_all(
        [SendRequest(sender="main-a", to="main-b", body=f"m{i}".encode()) for i in range(3)]
    )
    assert together == [3] and each == []
    on_pg = engine.dialect.name == "postgresql"
    assert (("COMMIT", ()) in carried) == (on_pg and as_the_gateway)
    assert not any(isinstance(e, Exception) for e in envs)
    assert [_row(engine, f"m{i}".encode()).lsn for i in range(3)] == [1, 2, 3]
    with session_factory(engine).begin() as s:
        abandon_branch(s, branch_key=_row(engine, b"m0").branch_key)
    together.clear()
    results = client.send_all([
        SendRequest(sender="main-a", to="worker-b", body=b"brief", kind=Kind.SEND),
        SendRequest(sender="main-a", to="main-b", body=b"gone"),
        SendRequest(sender="main-a", to="worker-b", body=b"brief 2", kind=Kind.SEND),
    ])  # fmt: skip
    assert isinstance(results[1], DeliveryError) and results[1].reason == "BRANCH_ABANDONED"
    assert [_row(engine, b).lsn for b in (b"brief", b"brief 2")] == [1, 2]  # once each
    briefs = [r.msg_id for r in (results[0], results[2]) if not isinstance(r, Exception)]
    assert _tracked(engine) == sorted(briefs), "each brief's deadline tracked, once"
    assert max(ahead, default=0) == (2 if on_pg else 0), "both rode with the first pass's rows"
    assert together == [2, 1]  # the first pass (worker-b, main-b), rolled back at main-b
    envs = client.send_all([SendRequest(sender="main-a", to="worker-b", body=b"brief 3")])
    assert _row(engine, b"brief 3").lsn == 3  # the writer goes on after the refusal
    if held is not None:
        held.close()


def _tracked(engine: Engine) -> list[str]:
    from pipeline.host.tracking import FORWARD

    with engine.connect() as c:
        return sorted(r.msg_id for r in c.execute(select(FORWARD.table.c.msg_id)))


def _row(engine: Engine, body: bytes) -> Any:
    with engine.connect() as c:
        return c.execute(
            select(outbox.c.lsn, outbox.c.branch_key).where(outbox.c.value == body)
        ).one()
