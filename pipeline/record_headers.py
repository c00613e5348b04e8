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


_PREFIXES: dict[str, bytes] = {}  # name -> u16 length + UTF-8 name (the same dozen names recur)
_MAX_PREFIXES = 4096  # bounded: foreign headers cannot grow it without limit


def _prefix(name: str) -> bytes:
    raw = name.encode()
    prefix = _NAME.pack(len(raw)) + raw
    if len(_PREFIXES) < _MAX_PREFIXES:
        _PREFIXES[name] = prefix
    return prefix


def pack_headers(headers: Iterable[tuple[str, bytes]] | None) -> bytes:
    """The stored form of ``headers`` (``b""`` for none). Runs once per held record on the
    consume thread, so each name's prefix is packed once per process."""
    parts: list[bytes] = []
    append = parts.append
    prefixes, size = _PREFIXES, _VALUE.pack
    for name, value in headers or ():
        append(prefixes.get(name) or _prefix(name))
        append(size(len(value)))
        append(value)
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
