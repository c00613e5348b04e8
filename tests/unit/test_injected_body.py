"""``injected_body`` and ``receipts_envelope`` write their Avro by hand (one per injected brief,
one per burst): the bytes must be exactly what ``schemas.encode`` writes, in either framing
(R-ENV-4: every reader decodes them with the schema), and a newer schema than the one they know
goes through ``schemas.encode``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import schemas
from pipeline.envelope import Envelope, Kind, receipts
from pipeline.schemas import Framing


@pytest.fixture(autouse=True)
def _process_framing() -> Iterator[None]:
    schemas.write_framing(Framing.V1)
    yield
    schemas.write_framing(Framing.V1)


def _by_schema(msg_id: str, recipient: str, at_ms: int, stage: str) -> bytes:
    record = {"msg_id": msg_id, "recipient": recipient, "injected_at_ms": at_ms, "stage": stage}
    return schemas.encode("injected", record)


@settings(max_examples=300, deadline=None)
@given(
    msg_id=st.text(max_size=300),
    recipient=st.text(max_size=80),
    at_ms=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    stage=st.sampled_from(["", "uncertain", "spawn", "stop"]),
    framing=st.sampled_from(list(Framing)),
)
def test_the_hand_written_body_is_the_schema_s_bytes(
    msg_id: str,
    recipient: str,
    at_ms: int,
    stage: str,
    framing: Framing,
) -> None:
    schemas.write_framing(framing)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(receipts, "now_ms", lambda: at_ms)
        got = receipts.injected_body(msg_id, recipient, stage=stage)
    assert got == _by_schema(msg_id, recipient, at_ms, stage)
    assert schemas.decode("injected", got) == {
        "msg_id": msg_id,
        "recipient": recipient,
        "injected_at_ms": at_ms,
        "stage": stage,
    }


def _spy_on_encode(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The schema names ``schemas.encode`` writes from now on, in order."""
    written: list[str] = []
    encode = schemas.encode

    def spy(name: str, record: dict[str, object], **kw: object) -> bytes:
        written.append(name)
        return encode(name, record)

    monkeypatch.setattr(schemas, "encode", spy)
    return written


def test_a_schema_with_other_fields_is_written_by_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-written form knows one field list; any other (a newer ``injected`` schema) is
    left to ``schemas.encode``, so the body never silently misses a field."""
    monkeypatch.setitem(receipts._WRITTEN, "injected", ("msg_id", "recipient"))
    monkeypatch.setattr(receipts, "_prefixes", {})
    monkeypatch.setattr(receipts, "now_ms", lambda: 42)
    written = _spy_on_encode(monkeypatch)
    assert receipts.injected_body("m", "w") == _by_schema("m", "w", 42, "")
    assert written == ["injected", "injected"]  # the body, then the expected bytes


_ITEM = st.tuples(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80),
                  st.binary(max_size=300))  # fmt: skip


def _items(drawn: list[tuple[str, str, bytes]]) -> list[Envelope]:
    return [Envelope(kind=Kind.INJECTED, msg_id=m, trace_id=t, sender="B._gateway", to="m",
                     ts_ms=1, expires_at_ms=2, body=b) for m, t, b in drawn]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(drawn=st.lists(_ITEM, min_size=1, max_size=70), framing=st.sampled_from(list(Framing)))
def test_the_hand_written_receipts_body_is_the_schema_s_bytes(
    drawn: list[tuple[str, str, bytes]], framing: Framing
) -> None:
    """Up to 70 items: an array's count past 63 takes a second byte."""
    schemas.write_framing(framing)
    items = _items(drawn)
    got = receipts.receipts_envelope(items, sender="B._gateway", ttl_s=60).body
    record = {"items": [{"msg_id": m, "trace_id": t, "body": b} for m, t, b in drawn]}
    assert got == schemas.encode("receipts", record)
    assert schemas.decode("receipts", got) == record


def test_a_receipts_schema_of_another_shape_is_written_by_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(receipts._WRITTEN, "receipts", (("items", ("msg_id", "body")),))
    monkeypatch.setattr(receipts, "_prefixes", {})
    written = _spy_on_encode(monkeypatch)
    receipts.receipts_envelope(_items([("m", "t", b"x")]), sender="B._gateway", ttl_s=60)
    assert written == ["receipts"]
