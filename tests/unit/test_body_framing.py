"""Body framing (docs/envelope.md "Body framing"): v1 ``0x00 N`` and v2 ``0xFB 0x02 N`` are both
read; the process writes v1 unless told v2; anything else is refused ``SCHEMA_INVALID`` with the
raw bytes kept (R-ENV-4), and the prefix is covered by the signature (R-ENV-2)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastavro.utils import generate_many
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import schemas
from pipeline.envelope import Kind, decode
from pipeline.envelope import reasons as r
from pipeline.errors import ConfigError, EnvelopeError
from pipeline.host.config import config_from_mapping, env_overrides
from pipeline.host.gateway_config import GatewayConfig
from pipeline.schemas import Framing
from tests.envelope_kit import Fleet

INJECTED = {"msg_id": "m1", "recipient": "w-9", "injected_at_ms": 7, "stage": ""}


@pytest.fixture(autouse=True)
def _process_framing() -> Iterator[None]:
    """Each test starts from, and leaves, the default: the framing is one per process."""
    schemas.write_framing(Framing.V1)
    yield
    schemas.write_framing(Framing.V1)


def _refused(data: bytes | None) -> EnvelopeError:
    with pytest.raises(EnvelopeError) as info:
        schemas.decode("injected", data)
    assert info.value.reason == r.SCHEMA_INVALID
    assert info.value.raw == data  # kept, so the record can still be dead-lettered
    return info.value


def test_the_two_framings_on_the_wire() -> None:
    v, _ = schemas.latest("injected")
    v1 = schemas.encode("injected", INJECTED, framing=Framing.V1)
    v2 = schemas.encode("injected", INJECTED, framing=Framing.V2)
    assert v1[:2] == bytes((0x00, v)) and v2[:3] == bytes((0xFB, 0x02, v))
    assert v1[2:] == v2[3:]  # the same Avro after either prefix


@pytest.mark.parametrize("name", sorted(schemas._index()))
@pytest.mark.parametrize("framing", list(Framing))
def test_every_schema_and_version_reads_back_in_either_framing(name: str, framing: Framing) -> None:
    for version, schema in schemas.versions(name).items():
        for record in generate_many(schema, 3):
            data = schemas.encode(name, record, version=version, framing=framing)
            assert data[0] == (0xFB if framing is Framing.V2 else 0x00)
            got = schemas.decode(name, data)
            for field in schema["fields"]:
                assert got[field["name"]] == record[field["name"]]


def test_the_process_writes_v1_until_told_v2() -> None:
    assert schemas.writing() is Framing.V1
    assert schemas.encode("injected", INJECTED)[0] == 0x00
    schemas.write_framing("v2")
    assert schemas.encode("injected", INJECTED)[:2] == b"\xfb\x02"
    assert schemas.encode("injected", INJECTED, framing=Framing.V1)[0] == 0x00  # explicit wins


@pytest.mark.parametrize(
    "first",
    [0x01, 0x03, 0xC3, 0x7B, 0xFF],  # a v0, Glue, Avro single-object, JSON, garbage first byte
    ids=["0x01", "glue-0x03", "single-object-0xC3", "json-brace", "0xFF"],
)
def test_an_unknown_first_byte_is_refused_schema_invalid(first: int) -> None:
    body = schemas.encode("injected", INJECTED, framing=Framing.V2)
    err = _refused(bytes((first,)) + body[1:])
    assert f"first byte 0x{first:02x}" in str(err)


def test_an_unknown_framing_version_after_the_magic_is_refused() -> None:
    body = schemas.encode("injected", INJECTED, framing=Framing.V2)
    err = _refused(b"\xfb\x03" + body[2:])
    assert "unknown body framing 0xfb 0x03" in str(err)


@pytest.mark.parametrize("data", [None, b"", b"\x00", b"\xfb", b"\xfb\x02"])
def test_an_empty_or_cut_prefix_is_refused(data: bytes | None) -> None:
    _refused(data)


def test_an_unknown_writer_version_is_refused_in_either_framing() -> None:
    body = schemas.encode("injected", INJECTED, framing=Framing.V2)
    assert "unknown writer version 99" in str(_refused(b"\xfb\x02\x63" + body[3:]))
    assert "unknown writer version 99" in str(_refused(b"\x00\x63" + body[3:]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_record_or_schema_invalid_never_anything_else(data: bytes) -> None:
    try:
        got = schemas.decode("injected", data)
    except EnvelopeError as exc:
        assert exc.reason == r.SCHEMA_INVALID and exc.raw == data
    else:
        assert isinstance(got, dict) and data[0] in (0x00, 0xFB)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 255).filter(lambda b: b not in (0x00, 0xFB)), st.binary(max_size=40))
def test_a_first_byte_but_0x00_or_0xfb_is_always_refused(first: int, rest: bytes) -> None:
    _refused(bytes((first,)) + rest)


def test_the_signature_covers_the_framing_prefix() -> None:
    """Re-framing a signed v2 body as v1 (same Avro, same record) is SIG_INVALID: the prefix is
    body bytes, and the body is covered (R-ENV-2)."""
    f = Fleet()
    v2 = schemas.encode("injected", INJECTED, framing=Framing.V2)
    rec = f.record(f.envelope(kind=Kind.INJECTED, body=v2))
    assert decode(f.verifier("b"), **rec).body == INJECTED
    rec["value"] = bytes((0x00, v2[2])) + v2[3:]
    with pytest.raises(EnvelopeError) as info:
        decode(f.verifier("b"), **rec)
    assert info.value.reason == r.SIG_INVALID


def test_a_signed_record_of_either_framing_decodes_at_one_reader() -> None:
    f = Fleet()
    verifier = f.verifier("b")
    for framing in Framing:
        body = schemas.encode("injected", INJECTED, framing=framing)
        assert decode(verifier, **f.record(f.envelope(kind=Kind.INJECTED, body=body))).body == (
            INJECTED
        )


def test_body_framing_is_a_config_key_v1_by_default() -> None:
    assert GatewayConfig(host="h").body_framing == "v1"
    assert config_from_mapping({"host": "h", "body_framing": "v2"}).body_framing == "v2"
    assert env_overrides({"FLEET_BODY_FRAMING": "v2"}) == {"body_framing": "v2"}
    with pytest.raises(ConfigError) as info:
        GatewayConfig(host="h", body_framing="v3")
    assert info.value.reason == "CONFIG_INVALID" and "body_framing" in str(info.value)
