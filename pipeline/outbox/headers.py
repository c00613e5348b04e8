"""Header names the relay adds, and the compact binary form stored in ``outbox.headers``.

The relay appends three headers to the stored ones so a consumer can fold without parsing the body:

* ``fleet.branchKey`` -- the branch key, UTF-8;
* ``fleet.lsn`` -- the lsn as ASCII decimal (readable in ``kcat``);
* ``fleet.tenant`` -- the tenant, UTF-8.

Stored headers are published verbatim and in order (the gateway stores already-signed envelope
headers; the signature covers a fixed subset, so the three extra headers do not disturb it).
"""

from __future__ import annotations

import struct

from pipeline.errors import StoreError
from pipeline.reasons import Outbox
from pipeline.record import Headers

BRANCH_HEADER = "fleet.branchKey"
LSN_HEADER = "fleet.lsn"
TENANT_HEADER = "fleet.tenant"


_NAME = struct.Struct(">H")
_VALUE = struct.Struct(">I")


def pack_headers(headers: Headers | None) -> bytes | None:
    """``u16 name length, name, u32 value length, value`` per header; ``None`` for no headers."""
    if not headers:
        return None
    parts: list[bytes] = []
    for name, value in headers:
        raw = name.encode()
        parts += [_NAME.pack(len(raw)), raw, _VALUE.pack(len(value)), bytes(value)]
    return b"".join(parts)


def unpack_headers(blob: bytes | None) -> Headers:
    out: Headers = []
    if not blob:
        return out
    view, pos, end = memoryview(blob), 0, len(blob)
    try:
        while pos < end:
            (n,) = _NAME.unpack_from(view, pos)
            pos += 2
            name = bytes(view[pos : pos + n]).decode()
            pos += n
            (m,) = _VALUE.unpack_from(view, pos)
            pos += 4
            if pos + m > end:
                raise struct.error("truncated header value")
            out.append((name, bytes(view[pos : pos + m])))
            pos += m
    except (struct.error, UnicodeDecodeError) as exc:
        raise StoreError(
            f"outbox headers blob is corrupt: {exc}", reason=Outbox.OUTBOX_CORRUPT, retriable=False
        ) from exc
    return out


def fold_headers(tenant: str, branch_key: str, lsn: int) -> Headers:
    return [
        (BRANCH_HEADER, branch_key.encode()),
        (LSN_HEADER, str(lsn).encode()),
        (TENANT_HEADER, tenant.encode()),
    ]


def fold_position(headers: Headers | None) -> tuple[str, int] | None:
    """``(branch_key, lsn)`` from a consumed record's headers, or ``None`` if it has none."""
    branch: str | None = None
    lsn: int | None = None
    for name, value in headers or ():
        if name == BRANCH_HEADER and value is not None:
            branch = bytes(value).decode()
        elif name == LSN_HEADER and value is not None:
            lsn = int(bytes(value))
    if branch is None or lsn is None:
        return None
    return branch, lsn
