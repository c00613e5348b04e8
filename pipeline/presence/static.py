"""A fixed :class:`~pipeline.envelope.PresenceView` for tests and tools: gid -> host."""

from __future__ import annotations

from collections.abc import Mapping


class StaticPresence:
    def __init__(self, hosts: Mapping[str, str] | None = None) -> None:
        self.hosts: dict[str, str] = dict(hosts or {})

    def host_of(self, gid: str) -> str | None:
        return self.hosts.get(gid)
