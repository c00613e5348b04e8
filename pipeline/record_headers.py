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


_NAMES: dict[bytes, str] = {}  # UTF-8 name -> name (the same dozen names recur), bounded
_U16, _U32 = _NAME.unpack_from, _VALUE.unpack_from


def unpack_headers(blob: bytes | None) -> Headers:
    """The headers of a stored blob, in their stored order (``[]`` for ``None`` or empty).

    Runs once per record the relay publishes and per held record read back, so it slices the
    bytes directly (no ``memoryview``) and decodes each name once per process."""
    out: Headers = []
    if not blob:
        return out
    if type(blob) is not bytes:
        blob = bytes(blob)  # a driver's memoryview or bytearray
    append, names = out.append, _NAMES
    pos, end = 0, len(blob)
    try:
        while pos < end:
            (n,) = _U16(blob, pos)
            pos += 2
            stop = pos + n
            if stop > end:
                raise struct.error("truncated header name")
            raw = blob[pos:stop]
            name = names.get(raw)
            if name is None:
                name = raw.decode()
                if len(names) < _MAX_PREFIXES:
                    names[raw] = name
            (m,) = _U32(blob, stop)
            pos = stop + 4 + m
            if pos > end:
                raise struct.error("truncated header value")
            append((name, blob[stop + 4 : pos]))
    except (struct.error, UnicodeDecodeError) as exc:
        raise StoreError(
            f"stored headers blob is corrupt: {exc}", reason=Outbox.OUTBOX_CORRUPT, retriable=False
        ) from exc
    return out
