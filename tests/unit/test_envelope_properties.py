"""Property tests (R-ENV-2): round trip; any bit flip in a covered header, the body
or the topic is SIG_INVALID; an uncovered header cannot change how a body decodes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import schemas
from pipeline.envelope import GATEWAY_KINDS, Envelope, Kind, codec_for, encode
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError
from tests.envelope_kit import NOW, Fleet

FLEET = Fleet()
VERIFIER = FLEET.verifier("b")
TOPIC = FLEET.topics.inbox("b")
gids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
bodies = st.binary(max_size=2048)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    kind = draw(st.sampled_from(list(Kind)))
    # a receipt is a gateway's alone (refused from an agent: tests/unit/test_receipts_record.py)
    sender = "a._gateway" if kind in GATEWAY_KINDS else "w-a"
    to = draw(gids.filter(lambda g: not g.startswith(r.BROADCAST_PREFIX)))
    if kind is Kind.BROADCAST:
        to = r.BROADCAST_PREFIX + to
    ttl_ms = draw(st.integers(min_value=0, max_value=86_400_000))
    ts = NOW + draw(st.integers(min_value=-ttl_ms, max_value=30_000))
    return Envelope(
        kind=kind,
        msg_id=draw(gids),
        trace_id=draw(gids),
        sender=sender,
        to=to,
        ts_ms=ts,
        expires_at_ms=ts + ttl_ms,
        body=draw(bodies),
        turn_id=draw(st.none() | gids),
        spawn_id=draw(st.none() | gids),
    )


def record(env: Envelope) -> dict[str, Any]:
    key, headers, value = encode(env, topic=TOPIC, signer=FLEET.signers["a"])
    return {"topic": TOPIC, "key": key, "headers": headers, "value": value}


def reason_of(rec: dict[str, Any]) -> str:
    try:
        VERIFIER.verify(**rec)
    except EnvelopeError as exc:
        return exc.reason
    raise AssertionError("a tampered record verified")


@SETTINGS
@given(envelopes())
def test_any_envelope_round_trips(env: Envelope) -> None:
    assert VERIFIER.verify(**record(env)).envelope == env


def flip(data: bytes, bit: int) -> bytes:
    i = bit % (len(data) * 8)
    out = bytearray(data)
    out[i // 8] ^= 1 << (i % 8)
    return bytes(out)


# ``v`` and ``keyId`` are selectors: they pick the canonical form and the key before any crypto,
# so damage to them is reported as what it looks like (docs/envelope.md, "Verification order").
CONTENT = [h for h in r.COVERED if h not in (r.H_V, r.H_KEY_ID)]


@SETTINGS
@given(envelopes(), st.sampled_from(CONTENT), st.integers(min_value=0))
def test_any_bit_flip_in_a_covered_header_is_sig_invalid(
    env: Envelope, name: str, bit: int
) -> None:
    rec = record(env)
    if name not in dict(rec["headers"]):
        return  # optional header absent in this draw; adding one is the next test
    rec["headers"] = [(n, flip(v, bit) if n == name else v) for n, v in rec["headers"]]
    assert reason_of(rec) == r.SIG_INVALID


@SETTINGS
@given(envelopes(), st.sampled_from([r.H_TURN_ID, r.H_SPAWN_ID]), gids)
def test_adding_or_removing_an_optional_header_is_sig_invalid(
    env: Envelope, name: str, value: str
) -> None:
    rec = record(env)
    present = dict(rec["headers"])
    if name in present:
        rec["headers"] = [h for h in rec["headers"] if h[0] != name]
    else:
        rec["headers"] = [(name, value.encode()), *rec["headers"]]
    assert reason_of(rec) == r.SIG_INVALID


@SETTINGS
@given(envelopes(), st.integers(min_value=0))
def test_any_bit_flip_in_the_body_is_sig_invalid(env: Envelope, bit: int) -> None:
    rec = record(env)
    rec["value"] = flip(rec["value"], bit) if rec["value"] else b"\x00"
    assert reason_of(rec) == r.SIG_INVALID


@SETTINGS
@given(envelopes(), st.integers(min_value=0))
def test_any_bit_flip_in_the_topic_is_sig_invalid(env: Envelope, bit: int) -> None:
    rec = record(env)
    raw = TOPIC.encode()
    i = bit % (len(raw) * 7)  # stay in 7-bit ASCII: topic names are ASCII on the wire
    rec["topic"] = flip(raw, (i // 7) * 8 + i % 7).decode("ascii")
    assert reason_of(rec) == r.SIG_INVALID


@SETTINGS
@given(envelopes(), st.sampled_from([r.H_V, r.H_KEY_ID]), st.integers(min_value=0))
def test_a_flipped_selector_is_still_rejected(env: Envelope, name: str, bit: int) -> None:
    rec = record(env)
    rec["headers"] = [(n, flip(v, bit) if n == name else v) for n, v in rec["headers"]]
    assert reason_of(rec) in {
        r.UNSUPPORTED_VERSION,
        r.UNKNOWN_KEY,
        r.MALFORMED_HEADERS,
        r.SIG_INVALID,
    }


header_names = st.text(min_size=1, max_size=20).filter(
    lambda n: n.casefold() not in r.RESERVED_FOLDED
)


@SETTINGS
@given(
    st.lists(st.tuples(header_names, st.binary(max_size=100)), max_size=15),
    st.integers(min_value=0, max_value=15),
)
def test_uncovered_headers_cannot_change_how_a_body_decodes(
    extra: list[tuple[str, bytes]], at: int
) -> None:
    body = schemas.encode("injected", {"msg_id": "m1", "recipient": "w-9", "injected_at_ms": NOW})
    env = FLEET.envelope(kind=Kind.INJECTED, body=body, msg_id="inj-1")
    rec = record(env)
    baseline = VERIFIER.verify(**rec)
    mixed = list(rec["headers"])
    mixed[at % (len(mixed) + 1) : at % (len(mixed) + 1)] = extra
    got = VERIFIER.verify(**{**rec, "headers": mixed})
    assert got == baseline
    codec = codec_for(got.envelope.kind)
    assert codec.deserialize(got.envelope.body, got.envelope.kind) == codec.deserialize(
        baseline.envelope.body, baseline.envelope.kind
    )
