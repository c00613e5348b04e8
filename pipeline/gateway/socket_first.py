"""Sends through the gateway's socket while one answers, else straight into the store.

For long-lived local writers -- the MCP server of a main -- that hold a :class:`GatewayClient`
anyway: each ``send`` / ``ask`` / ``answer`` / ``abandon`` first tries the host's gateway (one
short connection per call, so a restarted gateway is picked up at once), and writes the store
itself only when no gateway answers -- the same fallback, refusals and reason codes as ``fleet
send`` (docs/gateway.md, "The local socket"). Reads (``poll``, ``roster``) stay on the store.
"""

from __future__ import annotations

from pipeline.envelope import Envelope, Kind
from pipeline.host.socket_client import Queued
from pipeline.host.socket_first import SocketOrDirect

from .client import GatewayClient


class SocketFirst:
    """``GatewayClient``'s write verbs, through the socket at ``path`` when a gateway serves it.

    ``fallbacks`` counts the calls that found no gateway and wrote the store directly.
    """

    def __init__(self, path: str | None, direct: GatewayClient) -> None:
        self.direct = direct
        self._calls = SocketOrDirect(path)

    @property
    def path(self) -> str | None:
        return self._calls.path

    @property
    def fallbacks(self) -> int:
        return self._calls.fallbacks

    def send(
        self, *, sender: str, to: str, body: bytes, kind: Kind = Kind.SEND,
        ttl_s: float | None = None, trace_id: str | None = None,
    ) -> Queued | Envelope:  # fmt: skip
        return self._calls.call(
            lambda c: c.send(sender=sender, to=to, body=body, kind=kind.value, ttl_s=ttl_s,
                             trace_id=trace_id),
            lambda: self.direct.send(sender=sender, to=to, body=body, kind=kind, ttl_s=ttl_s,
                                     trace_id=trace_id),
        )  # fmt: skip

    def ask(
        self, *, sender: str, to: str, body: bytes, ttl_s: float = 120.0,
        trace_id: str | None = None,
    ) -> Queued | Envelope:  # fmt: skip
        return self._calls.call(
            lambda c: c.ask(sender=sender, to=to, body=body, ttl_s=ttl_s, trace_id=trace_id),
            lambda: self.direct.ask(
                sender=sender, to=to, body=body, ttl_s=ttl_s, trace_id=trace_id
            ),
        )

    def answer(
        self, *, sender: str, to: str, turn_id: str, body: bytes, trace_id: str | None = None
    ) -> Queued | Envelope:
        return self._calls.call(
            lambda c: c.answer(sender=sender, to=to, turn_id=turn_id, body=body, trace_id=trace_id),
            lambda: self.direct.answer(
                sender=sender, to=to, turn_id=turn_id, body=body, trace_id=trace_id
            ),
        )

    def abandon(self, *, sender: str, to: str, turn_id: str) -> Queued | Envelope:
        return self._calls.call(
            lambda c: c.abandon(sender=sender, to=to, turn_id=turn_id),
            lambda: self.direct.abandon(sender=sender, to=to, turn_id=turn_id),
        )
