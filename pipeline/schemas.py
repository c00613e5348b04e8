"""Avro schemas for structured bodies, parsed once, with a self-describing 2-byte prefix.

Files live in ``schemas/<name>.v<N>.avsc`` (repo) or ``pipeline/_schemas`` (wheel). Encoded bytes
are ``0x00, N`` (magic, writer version) followed by schemaless Avro written with version N;
:func:`decode` reads with the writer's version and resolves to the newest reader schema, so a
newer reader always reads data written by an older writer (checked by a compatibility test).
"""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path
from typing import Any

import fastavro

from pipeline.errors import EnvelopeError
from pipeline.reasons import Verification

MAGIC = 0
_FILE = re.compile(r"^(?P<name>[a-z_]+)\.v(?P<v>\d+)\.avsc$")
SCHEMA_INVALID = Verification.SCHEMA_INVALID


def schema_dir() -> Path:
    packaged = Path(__file__).parent / "_schemas"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "schemas"


@functools.cache
def _index() -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for path in sorted(schema_dir().glob("*.avsc")):
        m = _FILE.match(path.name)
        if m:
            parsed = fastavro.parse_schema(fastavro.schema.load_schema(str(path)))
            out.setdefault(m.group("name"), {})[int(m.group("v"))] = parsed
    return out


def versions(name: str) -> dict[int, Any]:
    try:
        return _index()[name]
    except KeyError:
        raise KeyError(f"no Avro schema named {name!r} in {schema_dir()}") from None


def latest(name: str) -> tuple[int, Any]:
    vs = versions(name)
    v = max(vs)
    return v, vs[v]


def encode(name: str, record: dict[str, Any], *, version: int | None = None) -> bytes:
    v, schema = latest(name) if version is None else (version, versions(name)[version])
    buf = io.BytesIO()
    buf.write(bytes((MAGIC, v)))
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def decode(name: str, data: bytes | None) -> dict[str, Any]:
    """Decode ``data``; any problem is an :class:`EnvelopeError` with reason ``SCHEMA_INVALID``."""
    if not data or len(data) < 2 or data[0] != MAGIC:
        raise EnvelopeError(
            f"{name}: missing or bad schema prefix", reason=SCHEMA_INVALID, raw=data
        )
    vs = versions(name)
    writer = vs.get(data[1])
    if writer is None:
        raise EnvelopeError(
            f"{name}: unknown writer version {data[1]}", reason=SCHEMA_INVALID, raw=data
        )
    _, reader = latest(name)
    buf = io.BytesIO(data[2:])
    try:
        record = fastavro.schemaless_reader(buf, writer, reader)
    except Exception as exc:  # truncated or corrupt bytes of any kind
        raise EnvelopeError(
            f"{name}: cannot decode: {exc}", reason=SCHEMA_INVALID, raw=data
        ) from exc
    if buf.tell() != len(data) - 2:
        raise EnvelopeError(f"{name}: trailing bytes", reason=SCHEMA_INVALID, raw=data)
    if not isinstance(record, dict):
        raise EnvelopeError(f"{name}: not a record", reason=SCHEMA_INVALID, raw=data)
    return record
