"""A local-socket connection's answers: request order, never a blocked decider, hang-up at the end.

:class:`Answers` is driven here with stand-in requests over a socket pair; the server that uses
it is covered end to end in ``test_gateway_socket.py``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from pipeline.gateway.socket_answers import Answers
from pipeline.host.socket_protocol import encode_frame, read_frame


class _Request:
    def __init__(self, rid: int, payload: str = "") -> None:
        self.id, self.payload = rid, payload
        self.result: Any = None

    def answer(self) -> dict[str, Any]:
        return {"id": self.id, "ok": {"payload": self.payload}}

    def frame(self) -> bytes:
        return encode_frame(self.answer())


def _serve(server: socket.socket) -> tuple[Answers, threading.Event]:
    closed = threading.Event()
    return Answers(server, closed.set), closed


def test_answers_go_out_in_request_order_whatever_order_they_are_decided_in() -> None:
    server, client = socket.socketpair()
    with server, client:
        answers, closed = _serve(server)
        requests = [_Request(i) for i in range(4)]
        for r in requests:
            answers.add(r)
        for i in (2, 0, 3, 1):  # decided out of order
            requests[i].result = "decided"
            answers.flush()
        answers.end()
        got = [read_frame(client) for _ in range(4)]
        assert [a["id"] for a in got if a is not None] == [0, 1, 2, 3]
        assert closed.wait(10)
        assert answers._sender is None  # the socket took every answer: no thread was started


def test_a_client_that_does_not_read_never_blocks_the_decider_and_loses_no_answer() -> None:
    server, client = socket.socketpair()
    with server, client:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        answers, closed = _serve(server)
        requests = [_Request(i, "x" * 2000) for i in range(200)]  # far above the buffer
        for r in requests:
            answers.add(r)
            r.result = "decided"
            answers.flush()  # returns although the client reads nothing yet
        answers.end()
        assert answers._sender is not None  # the backlog has a thread of its own
        got = [read_frame(client) for _ in range(200)]
        assert [a["id"] for a in got if a is not None] == list(range(200))
        assert closed.wait(10)


def test_the_connection_is_closed_only_once_every_request_is_answered() -> None:
    server, client = socket.socketpair()
    with server, client:
        answers, closed = _serve(server)
        late = _Request(0)
        answers.add(late)
        answers.end()
        assert not closed.is_set()  # the reader ended, one request is still undecided
        late.result = "decided"
        answers.flush()
        assert read_frame(client) == {"id": 0, "ok": {"payload": ""}}
        assert closed.wait(10)


def test_a_client_that_went_away_ends_the_connection() -> None:
    server, client = socket.socketpair()
    with server:
        answers, closed = _serve(server)
        client.close()
        r = _Request(0)
        answers.add(r)
        r.result = "decided"
        answers.flush()  # the send fails: nothing raised to the decider
        assert closed.wait(10)
