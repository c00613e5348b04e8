"""Sends through the gateway's socket while one answers, else straight into the store.

For long-lived local writers -- the MCP server of a main -- that hold a :class:`GatewayClient`
anyway: each ``send`` / ``ask`` / ``answer`` / ``abandon`` first tries the host's gateway (one
short connection per call, so a restarted gateway is picked up at once), and writes the store
itself only when no gateway answers -- the same fallback, refusals and reason codes as ``fleet
send`` (docs/gateway.md, "The local socket"). Reads (``poll``, ``roster``) stay on the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pipeline.envelope import Envelope, Kind
from pipeline.host.socket_client import GatewayUnavailable, Queued, SocketClient

from .client import GatewayClient

log = logging.getLogger(__name__)


class SocketFirst:
    """``GatewayClient``'s write verbs, through the socket at ``path`` when a gateway serves it.

    ``fallbacks`` counts the calls that found no gateway and wrote the store directly.
    """

    def __init__(self, path: str | None, direct: GatewayClient) -> None:
        self.path = path
        self.direct = direct
        self.fallbacks = 0
        self._warned = False

    def _call(
        self, through: Callable[[SocketClient], Queued], direct: Callable[[], Envelope]
    ) -> Queued | Envelope:
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

    def send(
        self, *, sender: str, to: str, body: bytes, kind: Kind = Kind.SEND,
        ttl_s: float | None = None,
    ) -> Queued | Envelope:  # fmt: skip
        return self._call(
            lambda c: c.send(sender=sender, to=to, body=body, kind=kind.value, ttl_s=ttl_s),
            lambda: self.direct.send(sender=sender, to=to, body=body, kind=kind, ttl_s=ttl_s),
        )

    def ask(self, *, sender: str, to: str, body: bytes, ttl_s: float = 120.0) -> Queued | Envelope:
        return self._call(
            lambda c: c.ask(sender=sender, to=to, body=body, ttl_s=ttl_s),
            lambda: self.direct.ask(sender=sender, to=to, body=body, ttl_s=ttl_s),
        )

    def answer(self, *, sender: str, to: str, turn_id: str, body: bytes) -> Queued | Envelope:
        return self._call(
            lambda c: c.answer(sender=sender, to=to, turn_id=turn_id, body=body),
            lambda: self.direct.answer(sender=sender, to=to, turn_id=turn_id, body=body),
        )

    def abandon(self, *, sender: str, to: str, turn_id: str) -> Queued | Envelope:
        return self._call(
            lambda c: c.abandon(sender=sender, to=to, turn_id=turn_id),
            lambda: self.direct.abandon(sender=sender, to=to, turn_id=turn_id),
        )
