"""The chaos suite's cut-off proxy on loopback sockets: it relays, a cut holds
bytes and connects without losing them, the heal delivers them. No broker needed."""

from __future__ import annotations

import socket
import threading

from pipeline.chaos.proxy import running
from pipeline.kafka.local.ports import free_ports


def _echo_server(port: int, stop: threading.Event) -> threading.Thread:
    srv = socket.create_server(("127.0.0.1", port))
    srv.settimeout(0.2)

    def serve() -> None:
        conns = []
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            conns.append(conn)
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


def test_a_cut_holds_traffic_and_the_heal_delivers_it() -> None:
    target, listen = free_ports(2)
    stop = threading.Event()
    _echo_server(target, stop)
    try:
        with running(listen, target) as proxy:
            a = socket.create_connection(("127.0.0.1", listen), timeout=5)
            a.sendall(b"one")
            assert a.recv(16) == b"one"
            proxy.cut()
            a.sendall(b"two")
            b = socket.create_connection(("127.0.0.1", listen), timeout=5)  # accepted, held
            b.sendall(b"three")
            a.settimeout(0.5)
            b.settimeout(0.5)
            for s in (a, b):
                try:
                    got = s.recv(16)
                except TimeoutError:
                    got = b""
                assert got == b"", "nothing may cross a cut"
            proxy.heal()
            a.settimeout(5)
            b.settimeout(5)
            assert a.recv(16) == b"two"
            assert b.recv(16) == b"three"
            assert proxy.connections == 2
            a.close()
            b.close()
    finally:
        stop.set()
