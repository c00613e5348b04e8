"""A plain copy of a consumed record, so failure handling can store and replay it verbatim."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from .dlq import Headers, normalise_headers


def key_text(key: bytes | None) -> str:
    """The text form of a record key used in the store and the CLI.

    UTF-8 keys (gids) are themselves; anything else is ``hex:<hex>`` so no key is unrepresentable.
    """
    if key is None:
        return ""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + key.hex()
    return "hex:" + key.hex() if text.startswith("hex:") else text


@dataclass(frozen=True, kw_only=True)
class RecordCopy:
    """The parts of a record that a replay must reproduce exactly."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    headers: Headers
    value: bytes | None

    @classmethod
    def from_message(cls, msg: Any) -> RecordCopy:
        _, ts = msg.timestamp()
        return cls(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            timestamp_ms=int(ts),
            key=msg.key(),
            headers=normalise_headers(msg.headers()),
            value=msg.value(),
        )


def encode_headers(headers: Headers) -> str:
    return json.dumps([[k, base64.b64encode(v).decode("ascii")] for k, v in headers])


def decode_headers(text: str) -> Headers:
    return [(str(k), base64.b64decode(v)) for k, v in json.loads(text)]
