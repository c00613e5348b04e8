"""Verification order and reason codes (R-ENV-4: any failed check is an explicit,
reasoned rejection -- never a crash, never silent acceptance)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.envelope import Kind, sign_fields
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError
from tests.envelope_kit import Fleet


def reason(fleet: Fleet, host: str = "b", **rec: Any) -> str:
    with pytest.raises(EnvelopeError) as info:
        fleet.verifier(host).verify(**rec)
    assert info.value.raw is not None and info.value.raw["topic"] == rec["topic"]
    return info.value.reason


def test_signed_by_a_for_gid_on_b_verifies_at_b() -> None:
    f = Fleet()
    got = f.verifier("b").verify(**f.record())
    assert got.signer_host == "a" and got.envelope.sender == "w-a" and got.envelope.body == b"brief"


def test_round_trip_keeps_every_field() -> None:
    f = Fleet()
    env = f.envelope(kind=Kind.ASK, turn_id="t1", spawn_id="s1", trace_id="tr")
    assert f.verifier("b").verify(**f.record(env)).envelope == env


def test_rekeyed_record_is_to_mismatch() -> None:
    f = Fleet()
    rec = f.record()
    assert reason(f, **{**rec, "key": b"m-other"}) == r.TO_MISMATCH
    assert reason(f, **{**rec, "key": None}) == r.TO_MISMATCH


def test_copied_into_another_hosts_inbox_is_to_mismatch() -> None:
    f = Fleet()
    rec = f.record()
    assert reason(f, "c", **{**rec, "topic": f.topics.inbox("c")}) == r.TO_MISMATCH


def test_record_on_a_foreign_topic_is_to_mismatch_or_sig_invalid() -> None:
    f = Fleet()
    rec = f.record()  # signed for b's inbox, verified by b but read from c's topic name
    assert reason(f, "b", **{**rec, "topic": f.topics.inbox("c")}) == r.SIG_INVALID


def test_from_not_on_signing_host_is_signer_mismatch() -> None:
    f = Fleet()
    rec = f.record(f.envelope(sender="m-c"), signer="a")  # m-c lives on c, a signed it
    assert reason(f, **rec) == r.SIGNER_MISMATCH


def test_sender_without_presence_is_unknown_sender() -> None:
    f = Fleet()
    assert reason(f, **f.record(f.envelope(sender="ghost"))) == r.UNKNOWN_SENDER


def test_gateway_sender_is_valid_only_for_its_own_host() -> None:
    f = Fleet()
    ok = f.record(f.envelope(sender="a._gateway"), signer="a")
    assert f.verifier("b").verify(**ok).envelope.sender == "a._gateway"
    bad = f.record(f.envelope(sender="c._gateway"), signer="a")
    assert reason(f, **bad) == r.SIGNER_MISMATCH


def test_unknown_key() -> None:
    f = Fleet()
    f.trust.remove(f.signers["a"].key_id)
    assert reason(f, **f.record()) == r.UNKNOWN_KEY


def test_expired_respects_skew() -> None:
    f = Fleet()
    rec = f.record(f.envelope(ttl_s=1))
    f.now += 1000 + 30_000  # exactly at the skew edge: still valid
    assert f.verifier("b").verify(**rec)
    f.now += 1
    assert reason(f, **rec) == r.EXPIRED


def test_future_ts_beyond_skew_is_clock_skew() -> None:
    f = Fleet()
    rec = f.record(f.envelope(now_ms=f.now + 31_000))
    assert reason(f, **rec) == r.CLOCK_SKEW


def test_ttl_too_long() -> None:
    f = Fleet()
    assert reason(f, **f.record(f.envelope(ttl_s=86_401))) == r.TTL_TOO_LONG


def test_replay_after_seen() -> None:
    f = Fleet()
    rec = f.record()
    got = f.verifier("b").verify(**rec)
    f.seen.add(got.envelope.msg_id)
    assert reason(f, **rec) == r.REPLAY


def test_broadcast_key_and_to_are_the_group() -> None:
    f = Fleet()
    env = f.envelope(kind=Kind.BROADCAST, to="broadcast.reviewers")
    rec = f.record(env)
    assert rec["key"] == b"broadcast.reviewers"
    assert f.verifier("b").verify(**rec).envelope.kind is Kind.BROADCAST
    not_bcast = f.record(f.envelope(kind=Kind.SEND, to="broadcast.reviewers"))
    assert reason(f, **not_bcast) == r.TO_MISMATCH


def test_control_topic_accepts_only_records_for_the_host_gateway() -> None:
    f = Fleet()
    env = f.envelope(kind=Kind.SPAWN, sender="a._gateway", to="b._gateway", spawn_id="w-new")
    key, headers, value = _encode_on(f, env, f.topics.control("b"))
    got = f.verifier("b").verify(topic=f.topics.control("b"), key=key, headers=headers, value=value)
    assert got.envelope.spawn_id == "w-new"
    env2 = f.envelope(kind=Kind.SPAWN, sender="a._gateway", to="m-b")
    key, headers, value = _encode_on(f, env2, f.topics.control("b"))
    assert reason(f, topic=f.topics.control("b"), key=key, headers=headers, value=value) == (
        r.TO_MISMATCH
    )


def _encode_on(f: Fleet, env: Any, topic: str) -> Any:
    from pipeline.envelope import encode

    return encode(env, topic=topic, signer=f.signers["a"])


# -- bad inputs: each gives its own reason code ---------------------------------------------
def test_no_headers_or_no_sig_is_not_signed() -> None:
    f = Fleet()
    rec = f.record()
    assert reason(f, **{**rec, "headers": None}) == r.NOT_SIGNED
    assert reason(f, **{**rec, "headers": []}) == r.NOT_SIGNED
    assert reason(f, **{**rec, "headers": [h for h in rec["headers"] if h[0] != "sig"]}) == (
        r.NOT_SIGNED
    )


@pytest.mark.parametrize("name", ["v", "kind", "msgId", "traceId", "from", "to", "ts",
                                  "expiresAt", "keyId"])  # fmt: skip
def test_missing_required_header_is_malformed(name: str) -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [h for h in rec["headers"] if h[0] != name]
    assert reason(f, **rec) == r.MALFORMED_HEADERS


@pytest.mark.parametrize("name", ["msgId", "to", "sig", "keyId"])
def test_duplicate_header_is_malformed(name: str) -> None:
    f = Fleet()
    rec = f.record()
    dup = next(h for h in rec["headers"] if h[0] == name)
    rec["headers"] = [*rec["headers"], dup]  # even an identical duplicate is not guessed at
    assert reason(f, **rec) == r.MALFORMED_HEADERS


def test_look_alike_header_name_is_malformed() -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [*rec["headers"], ("MsgId", b"other")]
    assert reason(f, **rec) == r.MALFORMED_HEADERS


def test_header_with_null_value_is_malformed() -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [(n, None if n == "traceId" else v) for n, v in rec["headers"]]
    assert reason(f, **rec) == r.MALFORMED_HEADERS


def test_oversized_headers_too_many_headers_and_big_body_are_too_large() -> None:
    f = Fleet()
    rec = f.record()
    assert reason(f, **{**rec, "headers": [*rec["headers"], ("x-pad", b"p" * 9000)]}) == (
        r.TOO_LARGE
    )
    many = [*rec["headers"], *[(f"x-{i}", b"") for i in range(40)]]
    assert reason(f, **{**rec, "headers": many}) == r.TOO_LARGE
    big = f.record(f.envelope(body=b"x" * 1_048_577))
    assert reason(f, **big) == r.TOO_LARGE


def test_size_bounds_are_checked_before_any_crypto() -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [(n, b"\x00" * 64 if n == "sig" else v) for n, v in rec["headers"]]
    assert reason(f, **rec) == r.SIG_INVALID
    rec["headers"] = [*rec["headers"], ("x-pad", b"p" * 9000)]
    assert reason(f, **rec) == r.TOO_LARGE  # a bad sig never reached: bounds come first


def test_unsupported_version() -> None:
    f = Fleet()
    fields = f.envelope().header_fields() | {"v": b"2"}
    rec = _signed_raw(f, fields)
    assert reason(f, **rec) == r.UNSUPPORTED_VERSION


def test_unknown_kind_even_when_signed() -> None:
    f = Fleet()
    rec = _signed_raw(f, f.envelope().header_fields() | {"kind": b"DELETE_ALL"})
    assert reason(f, **rec) == r.UNKNOWN_KIND


@pytest.mark.parametrize("name", ["msgId", "traceId", "from", "to", "turnId", "spawnId"])
def test_non_utf8_ids_are_malformed_even_when_signed(name: str) -> None:
    f = Fleet()
    rec = _signed_raw(f, f.envelope().header_fields() | {name: b"\xff\xfe-bad"})
    assert reason(f, **rec) == r.MALFORMED_HEADERS


@pytest.mark.parametrize("value", [b"", b"-1", b"01", b"1e3", b" 5", b"99999999999999999"])
def test_ill_formed_times_are_malformed(value: bytes) -> None:
    f = Fleet()
    rec = _signed_raw(f, f.envelope().header_fields() | {"ts": value})
    assert reason(f, **rec) == r.MALFORMED_HEADERS


def test_non_utf8_key_id_is_malformed() -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [(n, b"\xff" if n == "keyId" else v) for n, v in rec["headers"]]
    assert reason(f, **rec) == r.MALFORMED_HEADERS


def test_empty_and_null_value_valid_only_when_signed_empty() -> None:
    f = Fleet()
    empty = f.record(f.envelope(body=b""))
    assert f.verifier("b").verify(**empty).envelope.body == b""
    assert f.verifier("b").verify(**{**empty, "value": None}).envelope.body == b""
    full = f.record()
    assert reason(f, **{**full, "value": None}) == r.SIG_INVALID
    assert reason(f, **{**full, "value": b""}) == r.SIG_INVALID


def test_short_signature_is_sig_invalid() -> None:
    f = Fleet()
    rec = f.record()
    rec["headers"] = [(n, v[:10] if n == "sig" else v) for n, v in rec["headers"]]
    assert reason(f, **rec) == r.SIG_INVALID


def _signed_raw(f: Fleet, fields: dict[str, bytes]) -> dict[str, Any]:
    topic = f.topics.inbox("b")
    headers = sign_fields(fields, topic=topic, body=b"brief", signer=f.signers["a"])
    return {"topic": topic, "key": fields.get("to", b"m-b"), "headers": headers, "value": b"brief"}


def test_every_reason_code_is_upper_case_and_unique() -> None:
    assert len(set(r.ALL_REASONS)) == len(r.ALL_REASONS)
    assert all(code.isupper() for code in r.ALL_REASONS)


def test_decode_is_verify_then_deserialize() -> None:
    from pipeline import schemas
    from pipeline.envelope import decode

    f = Fleet()
    body = schemas.encode("failed", {"msg_id": "m1", "recipient": "w-9", "reason": "EXPIRED",
                                     "error": "", "stage": "expiry", "failed_at_ms": 5})  # fmt: skip
    rec = f.record(f.envelope(kind=Kind.FAILED, body=body))
    got = decode(f.verifier("b"), **rec)
    assert got.body["reason"] == "EXPIRED" and got.verified.signer_host == "a"
    bad = f.record(f.envelope(kind=Kind.FAILED, body=body[:-2]))
    with pytest.raises(EnvelopeError) as info:
        decode(f.verifier("b"), **bad)
    assert info.value.reason == r.SCHEMA_INVALID and info.value.raw["value"] == body[:-2]
    assert decode(f.verifier("b"), **f.record()).body == b"brief"


@pytest.mark.parametrize(
    "change", [{"msg_id": ""}, {"to": ""}, {"turn_id": ""}, {"ts_ms": -1}, {"v": 2}]
)
def test_a_bad_envelope_fails_at_the_sender(change: dict[str, Any]) -> None:
    import dataclasses

    f = Fleet()
    with pytest.raises(EnvelopeError) as info:
        dataclasses.replace(f.envelope(), **change)
    assert info.value.reason == r.MALFORMED_HEADERS


def test_a_topic_that_is_not_utf8_is_rejected_not_raised() -> None:
    f = Fleet()
    assert reason(f, **{**f.record(), "topic": "fleet.inbox.\udcff"}) == r.TO_MISMATCH


def test_a_batch_of_ids_added_at_once_is_a_replay_and_the_seen_set_stays_bounded() -> None:
    from pipeline.envelope import BoundedSeenSet

    seen = BoundedSeenSet(capacity=3)
    seen.add("old")
    seen.add_all(["a", "b", "c"])
    assert [seen.contains(i) for i in ("old", "a", "b", "c")] == [False, True, True, True]
    assert len(seen) == 3, "the oldest entry went, as one add at a time would have done"
