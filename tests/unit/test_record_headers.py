"""The stored form of a record's headers (pipeline/record_headers.py), byte for byte."""

from __future__ import annotations

import struct

from pipeline import record_headers
from pipeline.record_headers import pack_headers, unpack_headers


def _by_the_spec(headers: list[tuple[str, bytes]]) -> bytes:
    """u16 name length, UTF-8 name, u32 value length, value: per header, in order."""
    out = b""
    for name, value in headers:
        raw = name.encode()
        out += struct.pack(">H", len(raw)) + raw + struct.pack(">I", len(value)) + value
    return out


def test_the_pack_is_the_documented_layout_and_round_trips_order_and_duplicates() -> None:
    headers = [
        ("v", b"1"),
        ("kind", b"SEND"),
        ("x-ünï", b""),
        ("kind", b"dup"),
        ("sig", b"\0" * 64),
    ]
    assert pack_headers(headers) == _by_the_spec(headers)
    assert pack_headers(headers) == pack_headers(headers)  # the cached prefixes change nothing
    assert unpack_headers(pack_headers(headers)) == headers
    assert pack_headers(None) == pack_headers([]) == b""


def test_foreign_header_names_cannot_grow_the_name_cache_past_its_bound() -> None:
    names = [f"x-foreign-{i}" for i in range(record_headers._MAX_PREFIXES + 500)]
    for name in names:
        assert pack_headers([(name, b"v")]) == _by_the_spec([(name, b"v")])
    assert len(record_headers._PREFIXES) <= record_headers._MAX_PREFIXES
