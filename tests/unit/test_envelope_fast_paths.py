"""The verifier's straight-line paths give what the field-by-field paths give (R-ENV-3: the
same stages, the same results; only the cost per record changed)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping

import pytest

from pipeline.envelope import Kind
from pipeline.envelope import reasons as r
from pipeline.envelope.canonical import DOMAIN_TAG, canonical_bytes
from pipeline.envelope.headers import _parse_each, collect, parse
from pipeline.envelope.keys import TrustStore
from pipeline.envelope.model import Envelope, parsed_envelope
from pipeline.errors import EnvelopeError
from tests.envelope_kit import Fleet

BOUNDS = {"max_headers": 32, "max_header_bytes": 8192, "max_body_bytes": 1 << 20}


def _canonical_by_loop(fields: Mapping[str, bytes | None], topic: str, body: bytes) -> bytes:
    """The layout as docs/envelope.md states it, one covered header after another."""
    out = DOMAIN_TAG
    for name in r.COVERED:
        value = fields.get(name)
        out += b"\x00" if value is None else b"\x01" + struct.pack(">I", len(value)) + value
    name_bytes = topic.encode()
    return (
        out + struct.pack(">I", len(name_bytes)) + name_bytes + struct.pack(">I", len(body)) + body
    )


@pytest.mark.parametrize("turn", [None, b"t1"])
@pytest.mark.parametrize("spawn", [None, b"s1"])
def test_canonical_bytes_is_the_documented_layout(turn: bytes | None, spawn: bytes | None) -> None:
    fields = {name: name.encode() * 3 for name in r.COVERED}
    fields[r.H_TURN_ID], fields[r.H_SPAWN_ID] = turn, spawn  # type: ignore[assignment]
    got = canonical_bytes(fields, topic="fleet.inbox.b", body=b"body")
    assert got == _canonical_by_loop(fields, "fleet.inbox.b", b"body")


def test_parsed_envelope_sets_every_field_as_the_checked_constructor_does() -> None:
    env = Envelope.new(kind=Kind.ASK, sender="a", to="b", body=b"x", ttl_s=5, turn_id="t")
    fast = parsed_envelope(
        env.kind, env.msg_id, env.trace_id, env.sender, env.to, env.ts_ms, env.expires_at_ms,
        env.body, env.turn_id, env.spawn_id,
    )  # fmt: skip
    assert fast == env
    for field in dataclasses.fields(Envelope):
        assert getattr(fast, field.name) == getattr(env, field.name)


@pytest.mark.parametrize("extra", [(), (("traceparent", b"00-x"),)])
def test_collect_and_parse_agree_with_the_field_by_field_paths(extra: tuple) -> None:
    f = Fleet()
    env = f.envelope(kind=Kind.ASK, turn_id="t1", spawn_id="s1")
    rec = f.record(env)
    headers = [*rec["headers"], *extra]
    fields = collect(rec["key"], headers, rec["value"], {}, **BOUNDS)
    assert parse(fields, rec["value"], {}) == _parse_each(fields, rec["value"], {}) == env


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        (r.H_KIND, b"NOPE", r.UNKNOWN_KIND),
        (r.H_MSG_ID, b"", r.MALFORMED_HEADERS),
        (r.H_FROM, b"\xff", r.MALFORMED_HEADERS),
        (r.H_TURN_ID, b"", r.MALFORMED_HEADERS),
        (r.H_TS, b"012", r.MALFORMED_HEADERS),
    ],
)
def test_parse_refuses_what_the_field_by_field_path_refuses(
    name: str, value: bytes, reason: str
) -> None:
    f = Fleet()
    rec = f.record(f.envelope())
    fields = {**collect(rec["key"], rec["headers"], rec["value"], {}, **BOUNDS), name: value}
    with pytest.raises(EnvelopeError) as info:
        parse(fields, rec["value"], {})
    assert info.value.reason == reason


def test_a_str_valued_or_repeated_header_takes_the_one_pass_loop() -> None:
    f = Fleet()
    rec = f.record(f.envelope())
    as_str = [(n, v.decode("latin-1") if n == r.H_TO else v) for n, v in rec["headers"]]
    assert collect(rec["key"], as_str, rec["value"], {}, **BOUNDS)[r.H_TO] == b"m-b"
    with pytest.raises(EnvelopeError) as info:
        collect(rec["key"], [*rec["headers"], (r.H_TO, b"x")], rec["value"], {}, **BOUNDS)
    assert info.value.reason == r.MALFORMED_HEADERS


def test_the_raw_key_id_index_follows_add_remove_and_reload(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = Fleet()
    signer = f.signers["a"]
    trust = TrustStore()
    trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    assert trust.lookup_raw(signer.key_id.encode()) is trust.lookup(signer.key_id)
    assert trust.remove(signer.key_id)
    assert trust.lookup_raw(signer.key_id.encode()) is None
    signer.write_public(tmp_path / f"{signer.key_id}.pub")
    trust.reload(tmp_path)
    assert trust.lookup_raw(signer.key_id.encode()) is not None


def test_uncovered_headers_are_carried_and_a_look_alike_among_them_is_refused() -> None:
    f = Fleet()
    rec = f.record(f.envelope())
    fold = [("fleet.branchKey", b"b"), ("fleet.lsn", b"7"), ("fleet.tenant", b"t")]
    for _ in range(2):  # the second time the names are known: the subset test takes them
        fields = collect(rec["key"], [*rec["headers"], *fold], rec["value"], {}, **BOUNDS)
        assert set(fields) <= r.RESERVED
    with pytest.raises(EnvelopeError) as info:
        collect(rec["key"], [*rec["headers"], *fold, ("MsgID", b"x")], rec["value"], {}, **BOUNDS)
    assert info.value.reason == r.MALFORMED_HEADERS
    with pytest.raises(EnvelopeError) as info:
        big = [*rec["headers"], *fold, ("fleet.pad", b"x" * 9000)]
        collect(rec["key"], big, rec["value"], {}, **BOUNDS)
    assert info.value.reason == r.TOO_LARGE


@pytest.mark.parametrize("turn", [None, "t1"])
@pytest.mark.parametrize("spawn", [None, "s1"])
def test_encode_signs_and_orders_as_sign_fields_does(turn: str | None, spawn: str | None) -> None:
    from pipeline.envelope import Signer
    from pipeline.envelope.codec import encode, sign_fields

    signer = Signer.generate("A")  # Ed25519 signatures are deterministic: equal bytes compare
    env = Envelope.new(kind=Kind.ASK, sender="main-a", to="wörker-b", body=b"\x00body",
                       ttl_s=60, turn_id=turn, spawn_id=spawn)  # fmt: skip
    key, headers, value = encode(env, topic="fleet.inbox.B", signer=signer)
    assert key == "wörker-b".encode() and value == b"\x00body"
    assert headers == sign_fields(
        env.header_fields(), topic="fleet.inbox.B", body=b"\x00body", signer=signer
    )


def test_a_minted_msg_id_is_a_uuid7_of_its_ts_and_its_trace_id_a_uuid4() -> None:
    import uuid

    env = Envelope.new(kind=Kind.SEND, sender="a", to="b", ttl_s=1)
    msg, trace = uuid.UUID(hex=env.msg_id), uuid.UUID(hex=env.trace_id)
    assert msg.version == 7 and msg.hex == env.msg_id and msg.variant == uuid.RFC_4122
    assert int(env.msg_id[:12], 16) == env.ts_ms  # the time field is the envelope's ts
    assert trace.version == 4 and trace.hex == env.trace_id and trace.variant == uuid.RFC_4122
    assert env.msg_id != env.trace_id
    # minted alone (a traceId given, or a msgId given): the same two kinds
    assert uuid.UUID(hex=Envelope.new(kind=Kind.SEND, sender="a", to="b", ttl_s=1,
                                      trace_id="t").msg_id).version == 7  # fmt: skip
    assert uuid.UUID(hex=Envelope.new(kind=Kind.SEND, sender="a", to="b", ttl_s=1,
                                      msg_id="m").trace_id).version == 4  # fmt: skip


def test_msg_ids_minted_in_a_later_millisecond_sort_after_and_never_repeat() -> None:
    """The reason for version 7: a later send's id sorts after an earlier one's, so the indexes
    keyed by msgId grow at their right edge (docs/store.md, "Time-ordered msgIds")."""
    import itertools

    from pipeline.envelope.model import new_msg_id

    ids = [new_msg_id(1_765_000_000_000 + ms) for ms in range(200) for _ in range(50)]
    by_ms = [ids[i : i + 50] for i in range(0, len(ids), 50)]
    assert all(max(a) < min(b) for a, b in itertools.pairwise(by_ms))
    assert len(set(ids)) == len(ids)  # 74 random bits inside one millisecond


@pytest.mark.parametrize("now_ms", [0, (1 << 48) - 1, 1 << 48, 10**16 - 1])
def test_a_ts_outside_48_bits_wraps_the_id_time_field_and_is_still_a_uuid7(now_ms: int) -> None:
    import uuid

    env = Envelope.new(kind=Kind.SEND, sender="a", to="b", ttl_s=0, now_ms=now_ms)
    assert env.ts_ms == now_ms and uuid.UUID(hex=env.msg_id).version == 7
    assert int(env.msg_id[:12], 16) == now_ms % (1 << 48)
