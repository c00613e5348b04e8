"""The one stored form of a record's headers: a compact binary pack, order and duplicates kept.

Every table that keeps Kafka headers stores this form: the outbox (``outbox.headers``), the held
store (``fleet_held.headers``) and the quarantine's parked records (``fleet_parked.headers``,
JSON of base64 pairs until store revision ``0008_parked_headers_binary`` converted it).

Per header: ``u16`` name length, the UTF-8 name, ``u32`` value length, the value. No headers is
the empty blob. A blob that does not decode is a :class:`~pipeline.errors.StoreError` with
reason ``OUTBOX_CORRUPT`` (the code predates the other users; never retriable: reading it again
gives the same bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from pipeline.errors import StoreError
from pipeline.reasons import Outbox
from pipeline.record import Headers

_NAME = struct.Struct(">H")
_VALUE = struct.Struct(">I")


def pack_headers(headers: Iterable[tuple[str, bytes]] | None) -> bytes:
    """The stored form of ``headers`` (``b""`` for none)."""
    parts: list[bytes] = []
    for name, value in headers or ():
        raw = name.encode()
        parts += [_NAME.pack(len(raw)), raw, _VALUE.pack(len(value)), bytes(value)]
    return b"".join(parts)


def unpack_headers(blob: bytes | None) -> Headers:
    """The headers of a stored blob, in their stored order (``[]`` for ``None`` or empty)."""
    out: Headers = []
    if not blob:
        return out
    view, pos, end = memoryview(blob), 0, len(blob)
    try:
        while pos < end:
            (n,) = _NAME.unpack_from(view, pos)
            pos += _NAME.size
            if pos + n > end:
                raise struct.error("truncated header name")
            name = bytes(view[pos : pos + n]).decode()
            pos += n
            (m,) = _VALUE.unpack_from(view, pos)
            pos += _VALUE.size
            if pos + m > end:
                raise struct.error("truncated header value")
            out.append((name, bytes(view[pos : pos + m])))
            pos += m
    except (struct.error, UnicodeDecodeError) as exc:
        raise StoreError(
            f"stored headers blob is corrupt: {exc}", reason=Outbox.OUTBOX_CORRUPT, retriable=False
        ) from exc
    return out
