"""Loopback port helpers: pick free ports, and refuse a requested port that is taken."""

from __future__ import annotations

import contextlib
import socket

from pipeline.errors import PortInUse

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct ports that were free a moment ago on 127.0.0.1."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ensure_free(port: int, *, what: str) -> None:
    """Raise :class:`PortInUse` naming ``what`` if ``port`` cannot be bound on loopback."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            raise PortInUse(
                f"port {port} on {LOOPBACK} is already in use (wanted for {what}); "
                "stop whatever holds it or choose another port",
                context={"port": port},
            ) from exc
