"""The two ports the lag sampler reads through, so tests can count calls and fake the broker.

* :class:`OffsetReader` -- the Kafka side. Every method is ONE batched round of admin calls for
  the whole fleet, never one call per partition: the exporter's cost stays flat as it grows.
* :class:`StoreGauges` -- the database side (held messages, quarantine, outbox). Other
  subsystems own those tables; the composition root passes an implementation in, or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

TopicPartitionKey = tuple[str, int]


class OffsetReader(Protocol):
    def list_groups(self, prefix: str) -> list[str]:
        """Consumer group ids starting with ``prefix`` (one ListGroups round)."""
        ...

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartitionKey, int]]:
        """Committed offsets of every partition each group has committed on."""
        ...

    def watermarks(
        self, partitions: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """``(log_start, log_end)`` per partition; unknown partitions (deleted topics) are left out."""
        ...

    def record_timestamps(
        self, positions: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int | None]:
        """Timestamp (ms) of the first data record at or after each offset, where one is read.

        ``None`` means the reader reached the log end without a data record: only transaction
        markers lie between the offset and the end (a read_committed group committed just
        before a commit marker), so nothing is waiting. Partitions not read in time are left out.
        """
        ...

    def retention_ms(self, topics: Iterable[str]) -> dict[str, int | None]:
        """``retention.ms`` per topic; ``None`` when unlimited (-1) or the topic is compact-only
        (``cleanup.policy`` without ``delete``: time never deletes its records)."""
        ...

    def partitions_of(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` ([] if it does not exist)."""
        ...


class StoreGauges(Protocol):
    """Store-backed fleet gauges. Implemented by whoever owns the tables (held store,
    quarantine, outbox); each call is one cheap aggregate query, run once per sample cycle."""

    def held_messages(self) -> int: ...

    def quarantined_keys(self) -> int: ...

    def outbox_backlog(self) -> int: ...

    def oldest_unsent_age_seconds(self) -> float: ...
