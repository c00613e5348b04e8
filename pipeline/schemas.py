"""Avro schemas for structured bodies, parsed once, behind a self-describing prefix (the framing).

Files live in ``schemas/<name>.v<N>.avsc`` (repo) or ``pipeline/_schemas`` (wheel). Encoded bytes
are a framing prefix naming the writer version N, then schemaless Avro written with version N;
:func:`decode` reads with the writer's version and resolves to the newest reader schema, so a
newer reader always reads data written by an older writer (checked by a compatibility test).

The two framings (docs/envelope.md "Body framing")::

    v1   0x00 N         releases up to 0.12.0; 0x00 is also the Confluent wire format's magic
                        byte, so a Confluent deserializer reads N and the Avro after it as a
                        4-byte schema id
    v2   0xFB 0x02 N    0xFB: a byte no registry framing starts with (Confluent, Apicurio and
                        Azure 0x00, AWS Glue 0x03, Avro single-object 0xC3 0x01) and never
                        valid in UTF-8; 0x02: the framing's own version

:func:`decode` reads both. :func:`encode` writes the process's framing (:func:`write_framing`,
set from ``body_framing`` by the composition root), v1 by default: a v0.12.0 reader refuses
any first byte but 0x00, so v2 is written only once no such reader is left.
"""

from __future__ import annotations

import enum
import functools
import io
import re
from pathlib import Path
from typing import Any

import fastavro

from pipeline.errors import EnvelopeError
from pipeline.reasons import Verification

MAGIC_V1 = 0x00
MAGIC_V2 = 0xFB
FRAMING_V2 = 0x02  # the byte after MAGIC_V2: this layout; any other is refused


class Framing(enum.StrEnum):
    """How a structured body's bytes start (the ``body_framing`` config key)."""

    V1 = "v1"  # 0x00 N
    V2 = "v2"  # 0xFB 0x02 N


class _Process:
    """What this process writes: one framing per process, set where it is built."""

    framing = Framing.V1


def write_framing(framing: Framing | str) -> None:
    """Set the framing :func:`encode` writes in this process (the last call wins)."""
    _Process.framing = Framing(framing)


def writing() -> Framing:
    return _Process.framing


def prefix(version: int, framing: Framing | None = None) -> bytes:
    """The bytes before the Avro of a body written with schema ``version``."""
    if (framing or _Process.framing) is Framing.V2:
        return bytes((MAGIC_V2, FRAMING_V2, version))
    return bytes((MAGIC_V1, version))


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


def encode(
    name: str,
    record: dict[str, Any],
    *,
    version: int | None = None,
    framing: Framing | None = None,
) -> bytes:
    """``record`` as schema ``version`` (default the newest) behind ``framing`` (default the
    process's, :func:`write_framing`)."""
    v, schema = latest(name) if version is None else (version, versions(name)[version])
    buf = io.BytesIO()
    buf.write(prefix(v, framing))
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def _unframe(name: str, data: bytes) -> tuple[int, int]:
    """(writer version, where the Avro starts) of a v1 or v2 body; else ``SCHEMA_INVALID``."""
    if data[0] == MAGIC_V1 and len(data) >= 2:
        return data[1], 2
    if data[0] == MAGIC_V2 and len(data) >= 3:
        if data[1] != FRAMING_V2:
            raise EnvelopeError(
                f"{name}: unknown body framing 0x{MAGIC_V2:02x} 0x{data[1]:02x}",
                reason=SCHEMA_INVALID,
                raw=data,
            )
        return data[2], 3
    raise EnvelopeError(
        f"{name}: missing or bad framing prefix (first byte 0x{data[0]:02x})",
        reason=SCHEMA_INVALID,
        raw=data,
    )


def decode(name: str, data: bytes | None) -> dict[str, Any]:
    """Decode ``data`` in either framing; any problem is an :class:`EnvelopeError` with reason
    ``SCHEMA_INVALID`` and the raw bytes."""
    if not data:
        raise EnvelopeError(f"{name}: empty body", reason=SCHEMA_INVALID, raw=data)
    version, start = _unframe(name, data)
    vs = versions(name)
    writer = vs.get(version)
    if writer is None:
        raise EnvelopeError(
            f"{name}: unknown writer version {version}", reason=SCHEMA_INVALID, raw=data
        )
    _, reader = latest(name)
    buf = io.BytesIO(data[start:])
    try:
        record = fastavro.schemaless_reader(buf, writer, reader)
    except Exception as exc:  # truncated or corrupt bytes of any kind
        raise EnvelopeError(
            f"{name}: cannot decode: {exc}", reason=SCHEMA_INVALID, raw=data
        ) from exc
    if buf.tell() != len(data) - start:
        raise EnvelopeError(f"{name}: trailing bytes", reason=SCHEMA_INVALID, raw=data)
    if not isinstance(record, dict):
        raise EnvelopeError(f"{name}: not a record", reason=SCHEMA_INVALID, raw=data)
    return record
