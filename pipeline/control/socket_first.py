"""SPAWN and STOP through the gateway's local socket while one answers, else into the store.

The MCP server's lifecycle tools (and any long-lived requester holding a :class:`ControlClient`)
use this subclass: each ``spawn`` / ``stop`` first tries the host's gateway, which commits it
as it commits sends (docs/gateway.md, "The local socket"); when no gateway answers it is
:class:`ControlClient`'s own, writing the store directly. Same refusals and reason codes either
way (``UNKNOWN_HOST``, ``UNKNOWN_WORKER``, ``NOT_LOCAL_SENDER``); ``workers`` reads the store.
"""

from __future__ import annotations

from typing import Any

from pipeline.host.socket_client import GatewayUnavailable, SocketClient

from .client import ControlClient, SpawnRequest, StopRequest


class SocketFirstControl(ControlClient):
    """A :class:`ControlClient` whose writes go through the socket at ``socket_path`` first;
    ``fallbacks`` counts those that found no gateway."""

    socket_path: str | None = None
    fallbacks: int = 0

    @classmethod
    def over(cls, direct: ControlClient, socket_path: str | None) -> SocketFirstControl:
        client = cls(
            sessions=direct.sessions,
            publisher=direct.publisher,
            deadline_s=direct.deadline_s,
            local_senders=direct.local_senders,
        )
        client.socket_path = socket_path
        return client

    def _through(self, op: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        if not self.socket_path:
            return None
        try:
            socket = SocketClient.connect(self.socket_path)
        except GatewayUnavailable:
            self.fallbacks += 1
            return None
        with socket:
            return socket.control(op, **fields)

    def spawn(
        self,
        *,
        requester: str,
        host: str,
        profile: str,
        spawn_id: str | None = None,
        parent: str | None = None,
        job: str | None = None,
        brief: str | None = None,
        budget: int | None = None,
        groups: tuple[str, ...] = (),
    ) -> SpawnRequest:
        fields: dict[str, Any] = {"requester": requester, "host": host, "profile": profile,
                                  "spawn_id": spawn_id, "parent": parent, "job": job,
                                  "brief": brief, "budget": budget}  # fmt: skip
        got = None if groups else self._through("spawn", fields)  # groups: not on the socket
        if got is not None:
            return SpawnRequest(**got)
        return super().spawn(**fields, groups=groups)

    def stop(
        self,
        *,
        requester: str,
        gid: str,
        host: str | None = None,
        reason: str | None = None,
        stop_id: str | None = None,
    ) -> StopRequest:
        fields: dict[str, Any] = {"requester": requester, "gid": gid, "host": host,
                                  "reason": reason, "stop_id": stop_id}  # fmt: skip
        got = self._through("stop", fields)
        return StopRequest(**got) if got is not None else super().stop(**fields)
