"""SPAWN and STOP through the gateway's local socket while one answers, else into the store.

The MCP server's lifecycle tools (and any long-lived requester holding a :class:`ControlClient`)
use this wrapper: each ``spawn`` / ``stop`` first tries the host's gateway, which commits it
as it commits sends (docs/gateway.md, "The local socket"); when no gateway answers the wrapped
:class:`ControlClient` writes the store directly (:mod:`pipeline.host.socket_first`, the rule
sends follow too). Same refusals and reason codes either way (``UNKNOWN_HOST``,
``UNKNOWN_WORKER``, ``NOT_LOCAL_SENDER``); ``workers`` reads the store.
"""

from __future__ import annotations

from typing import Any

from pipeline.host.socket_first import SocketOrDirect

from .client import ControlClient, SpawnRequest, StopRequest


class SocketFirstControl:
    """:class:`ControlClient`'s verbs, the writes through the socket at ``socket_path`` first;
    ``fallbacks`` counts the writes that found no gateway and wrote the store directly."""

    def __init__(self, socket_path: str | None, direct: ControlClient) -> None:
        self.direct = direct
        self._calls = SocketOrDirect(socket_path)

    @property
    def socket_path(self) -> str | None:
        return self._calls.path

    @property
    def fallbacks(self) -> int:
        return self._calls.fallbacks

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
        if groups:  # groups do not travel on the socket: the store, not a fallback
            return self.direct.spawn(**fields, groups=groups)
        return self._calls.call(
            lambda c: SpawnRequest(**c.control("spawn", **fields)),
            lambda: self.direct.spawn(**fields),
        )

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
        return self._calls.call(
            lambda c: StopRequest(**c.control("stop", **fields)),
            lambda: self.direct.stop(**fields),
        )

    def workers(self, requester: str) -> list[dict[str, Any]]:
        return self.direct.workers(requester)
