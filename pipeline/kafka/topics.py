"""Topic names, in one place. The prefix is configurable (default ``fleet.``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.reasons import Config

DLQ_SCAN_GROUP_PREFIX = "fleet-dlq-scan."
"""``fleet dlq ls|show|replay`` read with a throw-away group under this prefix (assign only)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,100}$")


def check_name(value: str, *, what: str) -> str:
    """Host ids, pool names and the like become topic-name parts: keep them to a safe charset."""
    if not _NAME.match(value):
        raise ConfigError(
            f"invalid {what} {value!r}: use letters, digits, '-' or '_' (max 101 chars)",
            reason=Config.INVALID_NAME,
        )
    return value


@dataclass(frozen=True, kw_only=True)
class TopicNames:
    """Every topic and group name the fleet uses, from one prefix (see DESIGN §1 topology)."""

    prefix: str = "fleet."

    def inbox(self, host: str) -> str:
        return f"{self.prefix}inbox.{check_name(host, what='host id')}"

    def control(self, host: str) -> str:
        return f"{self.prefix}control.{check_name(host, what='host id')}"

    def pool(self, name: str) -> str:
        return f"{self.prefix}pool.{check_name(name, what='pool name')}"

    @property
    def roster(self) -> str:
        return f"{self.prefix}roster"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}dlq"

    def gateway_group(self, host: str) -> str:
        return f"{self.prefix}gw.{check_name(host, what='host id')}"

    def pool_group(self, name: str) -> str:
        return f"{self.prefix}pool.{check_name(name, what='pool name')}"
