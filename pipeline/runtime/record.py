"""A consumed Kafka record as a plain, immutable value (no client objects leak upward)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed Kafka record as a plain immutable value."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @classmethod
    def from_message(cls, msg: Any) -> Record:
        raw_headers = msg.headers() or []
        headers = tuple((k, v if v is not None else b"") for k, v in raw_headers)
        _ts_type, ts = msg.timestamp()
        return cls(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            key=msg.key(),
            value=msg.value(),
            headers=headers,
            timestamp_ms=int(ts),
        )

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def header_str(self, name: str) -> str | None:
        raw = self.header(name)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @property
    def key_str(self) -> str | None:
        if self.key is None:
            return None
        return self.key.decode("utf-8", errors="replace")
