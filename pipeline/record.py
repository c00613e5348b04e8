"""A consumed Kafka record as a plain, immutable value (no client objects leak upward).

One record type for the whole package: the runtime hands it to handlers, the dead-letter sinks
copy it verbatim, the quarantine store parks and replays it. One key-to-text rule
(:func:`key_text`) names a key everywhere (runtime, quarantine store, CLI).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

Headers = list[tuple[str, bytes]]
"""Kafka headers as the package passes them around (names are text, values bytes)."""


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
        # Once per consumed record, so built without the frozen dataclass's __init__ (measured:
        # 2-4x the cost of setting the slots directly, a few µs per record on this path).
        raw_headers = msg.headers()
        if not raw_headers:
            headers: tuple[tuple[str, bytes], ...] = ()
        elif None in map(_value_of, raw_headers):  # a header without a value: b""
            headers = tuple([(k, b"" if v is None else v) for k, v in raw_headers])
        else:  # the client's own (name, value) tuples, not a copy of each
            headers = tuple(raw_headers)
        rec = _new(cls)
        _set_topic(rec, msg.topic())
        _set_partition(rec, msg.partition())
        _set_offset(rec, msg.offset())
        _set_key(rec, msg.key())
        _set_value(rec, msg.value())
        _set_headers(rec, headers)
        _set_timestamp(rec, int(msg.timestamp()[1]))
        return rec

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
        """The key as text by :func:`key_text`; ``None`` for a keyless record."""
        return None if self.key is None else key_text(self.key)

    @property
    def ref(self) -> str:
        """Where the record was read: ``<topic>/<partition>/<offset>``."""
        return f"{self.topic}/{self.partition}/{self.offset}"


_new = object.__new__
_value_of = itemgetter(1)
# the slots' own setters: what the frozen __init__ reaches through object.__setattr__
(_set_topic, _set_partition, _set_offset, _set_key, _set_value, _set_headers, _set_timestamp) = (
    Record.__dict__[name].__set__
    for name in ("topic", "partition", "offset", "key", "value", "headers", "timestamp_ms")
)


def key_text(key: bytes | None) -> str:
    """The text form of a record key, used by the runtime, the store and the CLI alike.

    UTF-8 keys (gids) are themselves; anything else is ``hex:<hex>`` so no key is unrepresentable
    and a quarantined non-UTF-8 key is shown under the name it is stored under.
    """
    if key is None:
        return ""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + key.hex()
    return "hex:" + key.hex() if text.startswith("hex:") else text
