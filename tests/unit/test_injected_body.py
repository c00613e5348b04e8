"""``injected_body`` writes its Avro by hand (one per injected brief): the bytes must be exactly
what ``schemas.encode("injected", ...)`` writes, in either framing (R-ENV-4: every reader decodes
it with the schema), and a newer schema than the one it knows goes through ``schemas.encode``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import schemas
from pipeline.envelope import receipts
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


def test_a_schema_with_other_fields_is_written_by_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-written form knows one field list; any other (a newer ``injected`` schema) is
    left to ``schemas.encode``, so the body never silently misses a field."""
    monkeypatch.setattr(receipts, "_INJECTED_FIELDS", ("msg_id", "recipient"))
    monkeypatch.setattr(receipts, "_prefixes", {})
    monkeypatch.setattr(receipts, "now_ms", lambda: 42)
    written: list[str] = []
    encode = schemas.encode

    def spy(name: str, record: dict[str, object], **kw: object) -> bytes:
        written.append(name)
        return encode(name, record)

    monkeypatch.setattr(schemas, "encode", spy)
    assert receipts.injected_body("m", "w") == _by_schema("m", "w", 42, "")
    assert written == ["injected", "injected"]  # the body, then the expected bytes
