"""The body stage of the codec: serialize before signing, deserialize after verifying.

A body codec sees only the body bytes and the (signed) kind -- never an uncovered header -- so
nothing outside the signature can change how a body decodes (R-ENV-2).
"""

from __future__ import annotations

from typing import Any, Protocol

from pipeline import schemas

from .reasons import Kind


class BodyCodec(Protocol):
    def serialize(self, obj: Any, kind: Kind) -> bytes: ...
    def deserialize(self, data: bytes, kind: Kind) -> Any: ...


class RawBody:
    """Opaque bytes (UTF-8 text for briefs and replies): the identity codec."""

    def serialize(self, obj: Any, kind: Kind) -> bytes:
        return bytes(obj)

    def deserialize(self, data: bytes, kind: Kind) -> Any:
        return data


class AvroBody:
    """A structured body: ``schemas/<name>.v<N>.avsc`` behind its framing prefix (v1 ``0x00 N``
    or v2 ``0xFB 0x02 N``, :mod:`pipeline.schemas`); it reads both, writes the process's.

    A decode failure (empty, truncated, an unknown first byte, framing or writer version) raises
    ``EnvelopeError`` with reason ``SCHEMA_INVALID`` and the raw bytes, so the record can still be
    dead-lettered. The prefix is part of the body bytes, so the signature covers it (R-ENV-2)."""

    def __init__(self, name: str) -> None:
        schemas.latest(name)  # fail fast on a typo: the schema is parsed once, here
        self.name = name

    def serialize(self, obj: Any, kind: Kind) -> bytes:
        return schemas.encode(self.name, obj)

    def deserialize(self, data: bytes, kind: Kind) -> Any:
        return schemas.decode(self.name, data)


# Kinds whose body is an Avro record, by schema name.
STRUCTURED: dict[Kind, str] = {
    Kind.PRESENCE: "presence",
    Kind.SPAWN: "spawn",
    Kind.STOP: "stop",
    Kind.INJECTED: "injected",
    Kind.RECEIPTS: "receipts",
    Kind.FAILED: "failed",
}


def codec_for(kind: Kind) -> BodyCodec:
    name = STRUCTURED.get(kind)
    return RawBody() if name is None else AvroBody(name)
