"""How the quarantine store keeps a record's headers (JSON of ``[name, base64(value)]`` pairs)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence


def encode_headers(headers: Sequence[tuple[str, bytes]]) -> str:
    return json.dumps([[k, base64.b64encode(v).decode("ascii")] for k, v in headers])


def decode_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    return tuple((str(k), base64.b64decode(v)) for k, v in json.loads(text))
