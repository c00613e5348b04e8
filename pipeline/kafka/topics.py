"""Topic names, in one place. The prefix is configurable (default ``fleet.``)."""

from __future__ import annotations

from dataclasses import dataclass

from .names import check_name

# check_name lives in names.py (light: the gateway's config loader, on every `fleet send`'s path,
# imports it without this table); importing it from here keeps working
__all__ = ["DLQ_SCAN_GROUP_PREFIX", "TopicNames", "check_name"]

DLQ_SCAN_GROUP_PREFIX = "fleet-dlq-scan."
"""``fleet dlq ls|show|replay`` read with a throw-away group under this prefix (assign only)."""


@dataclass(frozen=True, kw_only=True)
class TopicNames:
    """Every topic and group name the fleet uses, from one prefix (R-TOP-1)."""

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
    def jobs(self) -> str:
        """The job ledger: admission claims and releases keyed by job id (R-FAIL-8)."""
        return f"{self.prefix}jobs"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}dlq"

    def gateway_group(self, host: str) -> str:
        return f"{self.prefix}gw.{check_name(host, what='host id')}"

    def pool_group(self, name: str) -> str:
        return f"{self.prefix}pool.{check_name(name, what='pool name')}"
