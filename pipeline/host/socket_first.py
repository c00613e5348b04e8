"""Through the gateway's local socket while one answers, else the caller's direct path.

The one rule of the long-lived local writers (the MCP server of a main): each call opens one
short connection (so a restarted gateway is picked up at once); when no gateway answers --
nothing was sent then (:class:`~pipeline.host.socket_client.GatewayUnavailable`) -- the call
takes its direct path, writing the store itself with the same refusals and reason codes
(docs/gateway.md, "The local socket"). Used by :mod:`pipeline.gateway.socket_first` (sends)
and :mod:`pipeline.control.socket_first` (spawn, stop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from .socket_client import GatewayUnavailable, SocketClient

log = logging.getLogger(__name__)

T = TypeVar("T")
D = TypeVar("D")


class SocketOrDirect:
    """Calls through the socket at ``path`` when a gateway serves it, else direct.

    ``fallbacks`` counts the calls that found no gateway (or had no socket to try) and took the
    direct path; the first of an outage is logged as a warning.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.fallbacks = 0
        self._warned = False

    def call(self, through: Callable[[SocketClient], T], direct: Callable[[], D]) -> T | D:
        if self.path:
            try:
                client = SocketClient.connect(self.path)
            except GatewayUnavailable as exc:
                if not self._warned:
                    log.warning("no gateway on %s (%s): writing the store directly", self.path,
                                exc)  # fmt: skip
                    self._warned = True
            else:
                self._warned = False
                with client:
                    return through(client)
        self.fallbacks += 1
        return direct()
