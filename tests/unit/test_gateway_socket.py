"""The gateway's local socket: framing, refusals, permissions, group commit, fallback.

The server here is the production :class:`SocketServer` over a real :class:`GatewayClient` on a
SQLite store; only the relay is absent (``on_commit`` is a counter). The real-broker half is
``tests/integration/test_gateway_socket.py``.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_client
from pipeline.cli.main import app
from pipeline.envelope import GATEWAY_KINDS, Envelope, Kind, Signer
from pipeline.errors import ConfigError, DeliveryError
from pipeline.gateway.socket_server import SocketServer, _Pending, parse_send
from pipeline.host import roster_cache
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.socket_client import GatewayUnavailable, SocketClient
from pipeline.host.socket_protocol import (
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    decode_body,
    encode_frame,
    error_data,
    error_from,
    read_frame,
)
from pipeline.outbox.tables import outbox
from pipeline.store import session_factory
from pipeline.support.waiting import wait_until
from pipeline.testing import one_host

FAR = 10**15


def _host(tmp_path: Path) -> tuple[Any, Any, GatewayConfig]:
    host = one_host(tmp_path)
    return host.client, host.engine, host.config


def _rows(engine: Any) -> int:
    with engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(outbox)).scalar_one())


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    client, engine, cfg = _host(tmp_path)
    commits: list[int] = []
    path = cfg.local_socket
    assert path == f"{tmp_path / 'A.sqlite'}.sock"
    server = SocketServer(path=path, client=client, on_commit=lambda: commits.append(1)).start()
    yield server, engine, cfg, commits
    server.close()
    engine.dispose()


# -- framing ------------------------------------------------------------------------------------
def test_a_frame_is_a_length_then_one_json_object() -> None:
    frame = encode_frame({"id": 1, "op": "send"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4 and json.loads(frame[4:]) == {"id": 1, "op": "send"}


# the client's read_frame, and the server's FrameReader (chunked): the same frames and errors
READERS = {
    "read_frame": lambda sock: functools.partial(read_frame, sock),
    "FrameReader": lambda sock: FrameReader(sock).next,
}


@pytest.mark.parametrize("reader", READERS.values(), ids=list(READERS))
def test_frames_split_across_reads_and_back_to_back_are_read_whole(reader: Any) -> None:
    a, b = socket.socketpair()
    with a, b:
        data = encode_frame({"id": 1}) + encode_frame({"id": 2, "x": "y" * 5000})
        data += encode_frame({"id": 3})
        read = reader(b)

        def dribble() -> None:  # in 7-byte pieces, while the reader reads
            for i in range(0, len(data), 7):
                a.sendall(data[i : i + 7])
            a.shutdown(socket.SHUT_WR)

        writer = threading.Thread(target=dribble)
        writer.start()
        assert read() == {"id": 1}
        assert read() == {"id": 2, "x": "y" * 5000}
        assert read() == {"id": 3}
        assert read() is None  # a clean end between frames
        writer.join()


def test_frames_sent_together_are_read_one_by_one() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"".join(encode_frame({"id": i}) for i in range(5)))
        a.shutdown(socket.SHUT_WR)
        read = FrameReader(b).next
        assert [read() for _ in range(6)] == [{"id": i} for i in range(5)] + [None]


@pytest.mark.parametrize("reader", READERS.values(), ids=list(READERS))
def test_a_stream_cut_mid_frame_is_an_error_not_an_end(reader: Any) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame({"id": 1})[:-2])
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionResetError):
            reader(b)()


@pytest.mark.parametrize("reader", READERS.values(), ids=list(READERS))
def test_an_oversized_or_non_object_frame_is_refused(reader: Any) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1))
        with pytest.raises(FrameError) as err:
            reader(b)()
    assert err.value.context["limit"] == MAX_FRAME_BYTES
    with pytest.raises(FrameError):
        decode_body(b"[1, 2]")
    with pytest.raises(FrameError):
        decode_body(b"\xff{")


@pytest.mark.parametrize(
    "data", [b'{"a": 1} x', b'{"a": 1}{"b": 2}', b'{"a":', b"", b"nul", b'{"a" 1}']
)
def test_a_frame_is_one_json_object_and_nothing_else(data: bytes) -> None:
    with pytest.raises(FrameError):
        decode_body(data)


@pytest.mark.parametrize("data", [b'{"a":1,"b":[true,null]}', b' { "a" : 1 } ', b"{}"])
def test_a_frame_decodes_as_json_loads_reads_it(data: bytes) -> None:
    assert decode_body(data) == json.loads(data)


def test_an_error_travels_with_its_class_reason_retriable_and_context() -> None:
    sent = DeliveryError("nope", reason="UNKNOWN_RECIPIENT", context={"to": "x"})
    back = error_from(json.loads(json.dumps(error_data(sent))))
    assert type(back) is DeliveryError
    assert (back.reason, back.retriable, back.context, str(back)) == (
        "UNKNOWN_RECIPIENT",
        False,
        {"to": "x"},
        str(sent),
    )
    assert type(error_from({"type": "NotAnError", "reason": "X"})).__name__ == "FleetError"


def test_a_malformed_request_is_config_invalid_and_an_unknown_kind_unknown_kind() -> None:
    with pytest.raises(ConfigError) as bad:
        parse_send({"sender": "a", "to": "b", "body": "!!notbase64"})
    assert bad.value.reason == "CONFIG_INVALID"
    with pytest.raises(ConfigError) as kind:
        parse_send({"sender": "a", "to": "b", "body": "", "kind": "SHOUT"})
    assert kind.value.reason == "UNKNOWN_KIND"
    assert parse_send({"sender": "a", "to": "b", "body": "aGk=", "kind": "reply"}).body == b"hi"


# -- the server -----------------------------------------------------------------------------------
def test_a_send_through_the_socket_is_one_outbox_row_and_wakes_the_relay(served) -> None:  # type: ignore[no-untyped-def]
    server, engine, _cfg, commits = served
    with SocketClient.connect(server.path) as c:
        queued = c.send(sender="main-a", to="main-b", body=b"hello", kind="REPLY")
    assert len(queued.msg_id) == 32 and queued.ts_ms > 0
    assert _rows(engine) == 1 and commits == [1]


def test_the_socket_counts_requests_by_kind_and_outcome_and_its_group_sizes(tmp_path: Path) -> None:
    """Socket metrics: queued, refused (by reason) and malformed requests; one group per commit."""
    from prometheus_client import CollectorRegistry

    from pipeline.gateway.metrics import SocketMetrics

    client, engine, cfg = _host(tmp_path)
    registry = CollectorRegistry()
    server = SocketServer(
        path=cfg.local_socket or "", client=client, metrics=SocketMetrics(registry)
    ).start()
    try:
        with SocketClient.connect(server.path) as c:
            c.send_many([{"sender": "main-a", "to": "main-b", "body": b"x", "kind": "ASK",
                          "turn_id": "t1"}, {"sender": "main-a", "to": "nobody", "body": b"x"}])  # fmt: skip
            with pytest.raises(ConfigError):
                c.send(sender="main-a", to="main-b", body=b"x", kind="SHOUT")
    finally:
        server.close()
        engine.dispose()

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    requests = "fleet_gateway_socket_requests_total"
    assert value(requests, kind="ASK", outcome="queued") == 1
    assert value(requests, kind="SEND", outcome="refused") == 1
    assert value(requests, kind="OTHER", outcome="malformed") == 1  # SHOUT is no kind
    assert value("fleet_gateway_socket_refusals_total", reason="UNKNOWN_RECIPIENT") == 1
    assert value("fleet_gateway_socket_refusals_total", reason="UNKNOWN_KIND") == 1
    groups = value("fleet_gateway_socket_group_size_count") or 0
    sent = value("fleet_gateway_socket_group_size_sum")
    assert 1 <= groups <= 2 and sent == 2  # both in one group, or one each
    assert value("fleet_gateway_socket_commit_seconds_count") == groups


def test_a_refusal_is_the_same_fleet_error_as_the_direct_path(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """R-TOP-5: a send to nobody is refused at once (UNKNOWN_RECIPIENT), through either path."""
    server, engine, cfg, commits = served
    direct = build_client(cfg, signer=Signer.load(cfg.key_file or ""), engine=engine)
    with pytest.raises(DeliveryError) as d:
        direct.send(sender="main-a", to="nobody", body=b"x")
    with SocketClient.connect(server.path) as c, pytest.raises(DeliveryError) as s:
        c.send(sender="main-a", to="nobody", body=b"x")
    assert (s.value.reason, s.value.retriable, s.value.context, str(s.value)) == (
        d.value.reason,
        d.value.retriable,
        d.value.context,
        str(d.value),
    )
    with SocketClient.connect(server.path) as c, pytest.raises(DeliveryError) as who:
        c.send(sender="not-mine", to="main-b", body=b"x")
    assert who.value.reason == "NOT_LOCAL_SENDER"
    assert _rows(engine) == 0 and commits == []


@pytest.mark.parametrize("kind", sorted(GATEWAY_KINDS))
def test_an_agent_cannot_send_a_gateways_receipts(served, kind: Kind) -> None:  # type: ignore[no-untyped-def]
    """INJECTED, FAILED and RECEIPTS are a gateway's own (docs/envelope.md): refused
    UNKNOWN_KIND on either path, where its peers would refuse them too, and nothing is
    written."""
    server, engine, cfg, commits = served
    direct = build_client(cfg, signer=Signer.load(cfg.key_file or ""), engine=engine)
    with pytest.raises(DeliveryError) as d:
        direct.send(sender="main-a", to="main-b", body=b"x", kind=kind)
    with SocketClient.connect(server.path) as c, pytest.raises(DeliveryError) as s:
        c.send(sender="main-a", to="main-b", body=b"x", kind=kind.value)
    assert d.value.reason == s.value.reason == "UNKNOWN_KIND"
    assert _rows(engine) == 0 and commits == []


def test_a_group_commits_together_and_a_refused_send_leaves_the_others(served) -> None:  # type: ignore[no-untyped-def]
    server, engine, _cfg, _commits = served
    sends = [{"sender": "main-a", "to": "main-b", "body": f"m{i}".encode()} for i in range(50)]
    sends.insert(20, {"sender": "main-a", "to": "nobody", "body": b"x"})
    with SocketClient.connect(server.path) as c:
        results = c.send_many(sends)
    assert isinstance(results[20], DeliveryError) and results[20].reason == "UNKNOWN_RECIPIENT"
    assert sum(not isinstance(r, Exception) for r in results) == 50
    assert _rows(engine) == 50


def test_a_pending_batch_is_one_transaction(served) -> None:  # type: ignore[no-untyped-def]
    """Group commit: requests waiting together go through one send_all call."""
    server, engine, _cfg, _commits = served
    calls: list[int] = []
    real = server.client.send_all
    server.client.send_all = lambda reqs, **kw: calls.append(len(reqs)) or real(reqs, **kw)  # type: ignore[method-assign]
    batch = [
        _Pending(id=i, request=parse_send({"sender": "main-a", "to": "main-b", "body": ""}))
        for i in range(5)
    ]
    server.commit(batch)
    assert calls == [5] and all(p.result is not None for p in batch)
    assert [p.answer()["id"] for p in batch] == list(range(5)) and _rows(engine) == 5


def test_a_group_resolves_each_recipient_once_and_the_next_group_afresh(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Group commit reads a recipient's roster row once per transaction (a round trip per send
    on PostgreSQL otherwise); a later transaction reads it again, so a recipient tombstoned
    between two groups is refused, never served from the first group's copy."""
    server, engine, _cfg, _commits = served
    lookups: list[str] = []
    real = roster_cache.lookup
    monkeypatch.setattr(
        roster_cache, "lookup", lambda s, gid, *a: lookups.append(gid) or real(s, gid, *a)
    )
    batch = [
        _Pending(id=i, request=parse_send({"sender": "main-a", "to": "main-b", "body": ""}))
        for i in range(10)
    ]
    server.commit(batch)
    assert lookups == ["main-b"] and _rows(engine) == 10
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [])  # main-b retracted between the groups
    late = [_Pending(id=0, request=parse_send({"sender": "main-a", "to": "main-b", "body": ""}))]
    server.commit(late)
    assert late[0].answer()["error"]["reason"] == "UNKNOWN_RECIPIENT"
    assert _rows(engine) == 10


def test_concurrent_clients_each_get_their_own_answers(served) -> None:  # type: ignore[no-untyped-def]
    server, engine, _cfg, _commits = served
    got: dict[int, list[str]] = {}

    def one(n: int) -> None:
        with SocketClient.connect(server.path) as c:
            got[n] = [c.send(sender="main-a", to="main-b", body=b"x").msg_id for _ in range(20)]

    threads = [threading.Thread(target=one, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [m for v in got.values() for m in v]
    assert len(ids) == 80 == len(set(ids)) == _rows(engine)


def test_garbage_on_the_socket_is_answered_and_the_connection_closed(served) -> None:  # type: ignore[no-untyped-def]
    server, _engine, _cfg, _commits = served
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(server.path)
        s.sendall(struct.pack(">I", 3) + b"{{{")
        answer = read_frame(s)
        assert answer is not None and answer["error"]["reason"] == "DELIVERY_FAILED"
        assert read_frame(s) is None
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(server.path)
        s.sendall(encode_frame({"id": 9, "op": "delete-everything"}))
        answer = read_frame(s)
        assert answer is not None and answer["id"] == 9
        assert answer["error"]["reason"] == "CONFIG_INVALID"


# -- permissions and life cycle ---------------------------------------------------------------------
def test_the_socket_admits_only_its_owner_and_is_removed_on_close(tmp_path: Path) -> None:
    client, engine, cfg = _host(tmp_path)
    path = cfg.local_socket or ""
    server = SocketServer(path=path, client=client).start()
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert [p.name for p in tmp_path.iterdir() if "~" in p.name] == []  # no temp name left
    server.close()
    assert not os.path.exists(path)
    group = SocketServer(path=path, client=client, mode=0o660).start()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    group.close()
    with pytest.raises(ConfigError):
        SocketServer(path=path, client=client, mode=0o666)
    engine.dispose()


def test_a_stale_socket_is_replaced_and_a_live_one_is_not_taken_over(tmp_path: Path) -> None:
    client, engine, cfg = _host(tmp_path)
    path = cfg.local_socket or ""
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # bound, never listening: what a killed gateway leaves behind
    stale.close()
    with pytest.raises(GatewayUnavailable):
        SocketClient.connect(path)
    first = SocketServer(path=path, client=client).start()
    with pytest.raises(ConfigError) as taken:
        SocketServer(path=path, client=client).start()
    assert "another gateway" in str(taken.value)
    with SocketClient.connect(path) as c:  # the first one still serves
        c.send(sender="main-a", to="main-b", body=b"x")
    first.close()
    engine.dispose()


def test_no_socket_file_is_gateway_unavailable(tmp_path: Path) -> None:
    with pytest.raises(GatewayUnavailable):
        SocketClient.connect(str(tmp_path / "none.sock"))


def test_config_says_where_the_socket_is() -> None:
    sqlite = GatewayConfig(host="A", store_url="sqlite:////srv/fleet-<host>.sqlite")
    assert sqlite.local_socket == "/srv/fleet-A.sqlite.sock"
    assert GatewayConfig(host="A", socket_path="/run/fleet/<host>.sock").local_socket == (
        "/run/fleet/A.sock"
    )
    assert GatewayConfig(host="A", socket_path="").local_socket is None
    pg = GatewayConfig(host="A", store_url="postgresql+psycopg://u@h/db")
    assert pg.local_socket is None
    with pytest.raises(ConfigError) as bad:
        GatewayConfig(host="A", socket_mode=0o666)
    assert bad.value.context["key"] == "socket_mode"


# -- fleet send --------------------------------------------------------------------------------------
def _config_file(tmp_path: Path, cfg: GatewayConfig) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'host = "A"\nstore_url = "{cfg.store_url}"\nkey_file = "{cfg.key_file}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    return path


def test_fleet_send_goes_through_the_socket_when_the_gateway_serves(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _server, engine, cfg, commits = served
    out = CliRunner().invoke(
        app,
        ["send", "-c", str(_config_file(tmp_path, cfg)), "--from", "main-a", "--to", "main-b",
         "--kind", "reply", "--json", "hi"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["kind"] == "REPLY"
    assert json.loads(out.output)["via"] == "gateway"
    assert commits == [1] and _rows(engine) == 1  # the server committed it
    refused = CliRunner().invoke(
        app,
        ["send", "-c", str(_config_file(tmp_path, cfg)), "--from", "main-a", "--to", "nobody",
         "--json", "hi"],
    )  # fmt: skip
    assert refused.exit_code != 0
    assert json.loads(refused.output)["error"]["reason"] == "UNKNOWN_RECIPIENT"


def test_fleet_send_writes_the_store_directly_when_no_gateway_serves(tmp_path: Path) -> None:
    _client, engine, cfg = _host(tmp_path)
    assert not os.path.exists(cfg.local_socket or "")
    out = CliRunner().invoke(
        app,
        ["send", "-c", str(_config_file(tmp_path, cfg)), "--from", "main-a", "--to", "main-b",
         "--json", "hi"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["via"] == "store"
    assert _rows(engine) == 1
    engine.dispose()


# -- long-lived writers (the MCP server) ---------------------------------------------------------
def test_socket_first_writes_through_the_gateway_and_falls_back_when_it_is_gone(
    tmp_path: Path,
) -> None:
    """The MCP server's writes: through the socket while a gateway serves it (its commits), to
    the store directly once it is gone (counted in ``fallbacks``), with the same refusals."""
    from pipeline.envelope import Kind
    from pipeline.gateway.socket_first import SocketFirst

    client, engine, cfg = _host(tmp_path)
    commits: list[int] = []
    server = SocketServer(
        path=cfg.local_socket or "", client=client, on_commit=lambda: commits.append(1)
    ).start()
    writer = SocketFirst(cfg.local_socket, client)
    try:
        writer.send(sender="main-a", to="main-b", body=b"1", kind=Kind.REPLY)
        turn = writer.ask(sender="main-a", to="main-b", body=b"?").turn_id
        assert turn is not None
        writer.abandon(sender="main-a", to="main-b", turn_id=turn)
        assert (len(commits), writer.fallbacks) == (3, 0)
    finally:
        server.close()
    writer.answer(sender="main-a", to="main-b", turn_id="t1", body=b"late")
    assert (len(commits), writer.fallbacks) == (3, 1)
    with pytest.raises(DeliveryError) as gone:
        writer.send(sender="main-a", to="nobody", body=b"x")
    assert gone.value.reason == "UNKNOWN_RECIPIENT"
    assert _rows(engine) == 4
    engine.dispose()


# -- the control plane: spawn / stop -----------------------------------------------------------------
def test_spawn_and_stop_go_through_the_socket_with_the_direct_paths_refusals(
    tmp_path: Path,
) -> None:
    """R-SPAWN-3 requester side: ``fleet spawn`` / ``fleet stop`` through the gateway's
    socket queue the same rows as the direct path, and refuse with the same reason codes
    (UNKNOWN_HOST, UNKNOWN_WORKER, NOT_LOCAL_SENDER); with no gateway they write the store."""
    from pipeline.bootstrap.client import build_control_client
    from pipeline.control import spawn_requests_table
    from pipeline.control.socket_first import SocketFirstControl

    client, engine, cfg = _host(tmp_path)
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [
            roster_cache.RosterEntry("main-b", "B", "main", "pull", (), FAR),
            roster_cache.RosterEntry("B._gateway", "B", "gateway", "none", (), FAR),
        ])  # fmt: skip
    signer = Signer.load(cfg.key_file or "")
    control = build_control_client(cfg, signer=signer, engine=engine)
    commits: list[int] = []
    server = SocketServer(
        path=cfg.local_socket or "",
        client=client,
        control=control,
        on_commit=lambda: commits.append(1),
    ).start()
    config = _config_file(tmp_path, cfg)
    spawn = ["spawn", "-c", str(config), "--as", "main-a", "--profile", "shell", "--json"]
    try:
        out = CliRunner().invoke(app, [*spawn, "--host", "B", "--id", "w-7", "--job", "j"])
        assert out.exit_code == 0, out.output
        assert commits == [1]  # the gateway committed it
        got = json.loads(out.output)
        assert (got["spawnId"], got["host"], got["profile"]) == ("w-7", "B", "shell")
        stop = CliRunner().invoke(app, ["stop", "-c", str(config), "--as", "main-a", "--gid",
                                        "w-7", "--host", "B", "--json"])  # fmt: skip
        assert stop.exit_code == 0, stop.output
        assert json.loads(stop.output)["gid"] == "w-7" and commits == [1, 1]
        with SocketClient.connect(server.path) as c:
            for op, fields in (
                ("spawn", {"requester": "main-a", "host": "C", "profile": "shell"}),
                ("stop", {"requester": "main-a", "gid": "nobody"}),
                ("spawn", {"requester": "not-mine", "host": "B", "profile": "shell"}),
            ):
                call = control.spawn if op == "spawn" else control.stop
                with pytest.raises(DeliveryError) as direct:
                    call(**fields)  # type: ignore[arg-type]
                with pytest.raises(DeliveryError) as through:
                    c.control(op, **fields)
                assert (through.value.reason, str(through.value), through.value.context) == (
                    direct.value.reason, str(direct.value), direct.value.context)  # fmt: skip
            with pytest.raises(ConfigError):
                c.control("spawn", requester="main-a", host="B", profile=7)
        mcp_side = SocketFirstControl(cfg.local_socket, control)  # the MCP server's
        assert mcp_side.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-9")
        assert commits == [1, 1, 1] and mcp_side.fallbacks == 0
    finally:
        server.close()
    out = CliRunner().invoke(app, [*spawn, "--host", "B", "--id", "w-8"])  # no gateway: direct
    assert out.exit_code == 0, out.output
    mcp_side.stop(requester="main-a", gid="w-9", host="B")
    assert commits == [1, 1, 1] and mcp_side.fallbacks == 1
    with engine.connect() as c:
        rows = c.execute(select(spawn_requests_table.c.spawn_id)).scalars().all()
    assert sorted(rows) == ["w-7", "w-8", "w-9"]
    engine.dispose()


@pytest.mark.parametrize("ident", [7, 'a "quoted" id\n', None, 2.5, True, [1, "x"]])
@pytest.mark.parametrize("turn_id", [None, "turn-\u00e9"])
def test_a_queued_sends_answer_frame_is_its_answer_as_json(ident: Any, turn_id: Any) -> None:
    """A queued send's answer is formatted by hand (the common answer): the same JSON object
    as the encoder writes for :meth:`_Pending.answer`."""
    env = Envelope.new(kind=Kind.ASK, sender="main-a", to="main-b", ttl_s=60, turn_id=turn_id)
    pending = _Pending(id=ident, request=None, result=env)
    data = pending.frame()
    assert decode_body(data[4:]) == pending.answer()
    assert int.from_bytes(data[:4], "big") == len(data) - 4


def test_what_one_read_brings_is_committed_in_groups_of_at_most_max_batch(tmp_path: Path) -> None:
    """The reader commits what it read itself, in groups no larger than ``max_batch``; every
    request is answered, in order, and each committed once."""
    client, engine, cfg = _host(tmp_path)
    server = SocketServer(path=cfg.local_socket, client=client, max_batch=4).start()
    groups: list[int] = []
    real = client.send_all
    client.send_all = lambda reqs, **kw: groups.append(len(reqs)) or real(reqs, **kw)  # type: ignore[method-assign]
    try:
        sends = [{"sender": "main-a", "to": "main-b", "body": f"m{i}".encode()} for i in range(30)]
        with SocketClient.connect(server.path) as c:
            results = c.send_many(sends)
    finally:
        server.close()
    assert not any(isinstance(r, Exception) for r in results)
    assert len({r.msg_id for r in results}) == 30 == _rows(engine) == sum(groups)  # type: ignore[union-attr]
    assert max(groups) <= 4
    engine.dispose()


def test_every_connection_is_read_by_the_one_reader_thread_and_starts_none(
    served,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One connection after another (``fleet send``, the MCP server) starts no thread and is
    handed to none: the one reader thread accepts and reads each; a stopping server ends it."""
    server, engine, _cfg, _commits = served
    reader = server._reader
    readers: set[threading.Thread] = set()
    real = reader._request

    def request(message: Any, answers: Any, read: Any) -> None:
        readers.add(threading.current_thread())
        real(message, answers, read)

    reader._request = request
    started: list[str] = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda t: started.append(t.name) or start(t))
    for _ in range(5):
        with SocketClient.connect(server.path) as c:
            c.send(sender="main-a", to="main-b", body=b"x")
    assert readers == {reader.reader_thread()} and _rows(engine) == 5
    assert started == []
    server.close()
    (thread,) = readers
    thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("body", ["YQ", "Y Q==", "YQ==YQ==", "=", "é", "YQ=="[:3]])
def test_a_body_that_is_not_base64_is_refused_as_malformed(body: str) -> None:
    """Not base64 (or not ASCII at all): ``CONFIG_INVALID``, answered, never an uncaught error."""
    with pytest.raises(ConfigError) as refused:
        parse_send({"sender": "main-a", "to": "main-b", "body": body})
    assert refused.value.reason == "CONFIG_INVALID"


class _Clock:
    """The reader's clock: real time plus what the test lets pass."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.ahead


def _spaced(tmp_path: Path, **kw: Any) -> tuple[SocketServer, list[int], Any, _Clock]:
    client, engine, cfg = _host(tmp_path)
    groups: list[int] = []
    real = client.send_all
    client.send_all = lambda reqs, **k: groups.append(len(reqs)) or real(reqs, **k)  # type: ignore[method-assign]
    clock = _Clock()
    server = SocketServer(
        path=cfg.local_socket or "", client=client, spacing_s=60.0, clock=clock, **kw
    ).start()
    return server, groups, engine, clock


def _send_frame(i: int) -> bytes:
    return encode_frame({"id": i, "op": "send", "sender": "main-a", "to": "main-b",
                         "body": "eA==", "kind": "REPLY"})  # fmt: skip


def test_under_load_the_reader_spaces_its_groups_and_an_idle_send_is_not_held(
    tmp_path: Path,
) -> None:
    """The spacing: a send after a pause is committed at once; what comes within the spacing
    after a round is kept and committed as one group when it is out, every request answered,
    in order."""
    server, groups, engine, clock = _spaced(tmp_path, back_to_back_s=0.0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(server.path)
            s.sendall(_send_frame(0))
            assert "ok" in (read_frame(s) or {})  # committed at once: it was idle
            s.sendall(b"".join(_send_frame(i) for i in range(1, 4)))  # within the spacing
            s.sendall(_send_frame(4))
            wait_until(lambda: server._reader.kept() == 4, timeout_s=10,  # type: ignore[union-attr]
                       what="the reader keeping 4 spaced requests")  # fmt: skip
            assert groups == [1], "nothing handed over before the spacing is out"
            clock.ahead = 61.0  # the spacing is out: the next wait hands the round over
            server._reader._wake_w.send(b"x")  # type: ignore[union-attr]
            answers = [read_frame(s) or {} for _ in range(4)]
    finally:
        server.close()
    assert [a["id"] for a in answers] == [1, 2, 3, 4] and all("ok" in a for a in answers)
    assert groups == [1, 4] and _rows(engine) == 5
    engine.dispose()


def test_a_caller_waiting_for_each_answer_is_not_held_by_the_spacing(tmp_path: Path) -> None:
    """A caller that sends its next request right after the last answer (back to back) is
    answered at once, however long the spacing; a pipelined pair from it goes as one group."""
    server, groups, engine, _clock = _spaced(tmp_path, back_to_back_s=60.0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(server.path)
            for i in range(3):  # each after the last answer: never held for the 60 s spacing
                s.sendall(_send_frame(i))
                assert "ok" in (read_frame(s) or {})
            s.sendall(_send_frame(3) + _send_frame(4))
            answers = [read_frame(s) or {} for _ in range(2)]
    finally:
        server.close()
    assert [a["id"] for a in answers] == [3, 4]
    assert groups == [1, 1, 1, 2] and _rows(engine) == 5
    engine.dispose()


def test_a_stop_answers_the_requests_the_spacing_kept(tmp_path: Path) -> None:
    """Requests kept by the spacing when the gateway stops are answered, not dropped."""
    server, _groups, engine, _clock = _spaced(tmp_path, back_to_back_s=0.0)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(server.path)
        s.sendall(_send_frame(0))
        assert "ok" in (read_frame(s) or {})
        s.sendall(_send_frame(1))
        wait_until(lambda: server._reader.kept() == 1, timeout_s=10,  # type: ignore[union-attr]
                   what="the reader keeping the spaced request")  # fmt: skip
        server.close()
        answer = read_frame(s) or {}
    assert answer.get("id") == 1 and ("ok" in answer or "error" in answer)
    engine.dispose()
