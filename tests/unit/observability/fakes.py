"""An in-memory OffsetReader that counts calls, for sampler and collector unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.errors import BrokerError

TP = tuple[str, int]


@dataclass
class FakeReader:
    committed: dict[str, dict[TP, int]] = field(default_factory=dict)
    marks: dict[TP, tuple[int, int]] = field(default_factory=dict)
    stamps: dict[tuple[str, int, int], int] = field(default_factory=dict)  # (t, p, offset) -> ms
    retention: dict[str, int | None] = field(default_factory=dict)
    down: bool = False
    markers_only: set[TP] = field(default_factory=set)  # only txn markers up to the log end
    calls: dict[str, int] = field(default_factory=dict)
    timestamp_requests: list[dict[TP, int]] = field(default_factory=list)

    def _count(self, kind: str) -> None:
        if self.down:
            raise BrokerError("broker down (fake)")
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def list_groups(self, prefix: str) -> list[str]:
        self._count("list_groups")
        return sorted(g for g in self.committed if g.startswith(prefix))

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TP, int]]:
        self._count("committed_offsets")
        return {g: dict(self.committed[g]) for g in groups}

    def watermarks(self, partitions: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        self._count("watermarks")
        return {tp: self.marks[tp] for tp in partitions if tp in self.marks}

    def record_timestamps(self, positions: Mapping[TP, int]) -> dict[TP, int | None]:
        self._count("record_timestamps")
        self.timestamp_requests.append(dict(positions))
        out: dict[TP, int | None] = {}
        for (t, p), off in positions.items():
            if (t, p) in self.markers_only:
                out[(t, p)] = None
                continue
            # first readable record at or after off
            hits = sorted(o for (tt, pp, o) in self.stamps if (tt, pp) == (t, p) and o >= off)
            if hits:
                out[(t, p)] = self.stamps[(t, p, hits[0])]
        return out

    def retention_ms(self, topics: Iterable[str]) -> dict[str, int | None]:
        self._count("retention_ms")
        return {t: self.retention.get(t) for t in topics}

    def partitions_of(self, topic: str) -> list[int]:
        self._count("partitions_of")
        return sorted({p for t, p in self.marks if t == topic})


class FixedStore:
    def held_messages(self) -> int:
        return 3

    def quarantined_keys(self) -> int:
        return 1

    def outbox_backlog(self) -> int:
        return 7

    def oldest_unsent_age_seconds(self) -> float:
        return 12.5
