"""Batch verification across threads: same outcomes, same order as one by one."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.envelope import BatchVerifier, Kind
from pipeline.envelope import reasons as r
from pipeline.errors import EnvelopeError
from tests.envelope_kit import Fleet


def _items(f: Fleet) -> tuple[list[Any], list[str | None]]:
    """Good records interleaved with every kind of refusal, with the reason each must get."""
    items: list[Any] = []
    reasons: list[str | None] = []
    for i in range(60):
        rec = f.record(f.envelope(msg_id=f"good-{i}", kind=Kind.SEND))
        expected: str | None = None
        if i % 5 == 1:
            rec["value"] = rec["value"] + b"!"
            expected = r.SIG_INVALID
        elif i % 5 == 3:
            rec = f.record(f.envelope(msg_id=f"c-{i}", sender="m-c"), signer="a")
            expected = r.SIGNER_MISMATCH
        elif i % 7 == 0:
            rec["headers"] = None
            expected = r.NOT_SIGNED
        items.append((rec["topic"], rec["key"], rec["headers"], rec["value"]))
        reasons.append(expected)
    return items, reasons


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_outcomes_line_up_with_the_input_in_order(threads: int) -> None:
    f = Fleet()
    items, reasons = _items(f)
    batch = BatchVerifier(f.verifier("b"), threads=threads, min_batch=4)
    try:
        outcomes = batch.verify_all(items)
    finally:
        batch.close()
    assert len(outcomes) == len(items)
    for i, (outcome, expected) in enumerate(zip(outcomes, reasons, strict=True)):
        if expected is None:
            assert not isinstance(outcome, Exception), (i, outcome)
            assert outcome.envelope.msg_id == f"good-{i}"
        else:
            assert isinstance(outcome, EnvelopeError), (i, outcome)
            assert outcome.reason == expected, i


def test_a_small_batch_is_verified_inline_and_a_bad_thread_count_is_refused() -> None:
    f = Fleet()
    items, _ = _items(f)
    batch = BatchVerifier(f.verifier("b"), threads=2, min_batch=16)
    try:
        assert len(batch.verify_all(items[:3])) == 3
    finally:
        batch.close()
    with pytest.raises(ValueError, match="threads"):
        BatchVerifier(f.verifier("b"), threads=0)


class _Where:
    """A verifier that records which thread verified each record (and then verifies it)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.threads = inner, set()

    def verify(self, **record: Any) -> Any:
        import threading

        self.threads.add(threading.get_ident())
        return self.inner.verify(**record)


def test_a_mac_batch_stays_on_the_calling_thread_and_a_signed_one_uses_the_pool() -> None:
    import threading

    from tests.unit.test_envelope_pairwise import Mesh

    m = Mesh()
    maced = [m.record(m.f.envelope(msg_id=f"mac-{i}")) for i in range(40)]
    signed = [m.f.record(m.f.envelope(msg_id=f"sig-{i}")) for i in range(40)]
    for records, pooled, prefix in ((maced, False, "mac"), (signed, True, "sig")):
        where = _Where(m.verifier("b"))
        batch = BatchVerifier(where, threads=2, min_batch=4)  # type: ignore[arg-type]
        try:
            items = [(x["topic"], x["key"], x["headers"], x["value"]) for x in records]
            outcomes = batch.verify_all(items)
        finally:
            batch.close()
        assert all(not isinstance(o, Exception) for o in outcomes), outcomes
        ids = [o.envelope.msg_id for o in outcomes]  # type: ignore[union-attr]
        assert ids == [f"{prefix}-{i}" for i in range(40)]  # in order, wherever verified
        assert (where.threads != {threading.get_ident()}) is pooled, where.threads


@pytest.mark.parametrize("threads", [2, 3])
def test_a_bad_signature_gets_the_outcome_the_stages_give_one_by_one(threads: int) -> None:
    """R-ENV-3: a batch verified on several threads gives every record the outcome its stages
    give it one at a time: a forged record that is also expired is SIG_INVALID (stage 4 comes
    before the clock), an authentic record copied into the wrong inbox TO_MISMATCH."""
    f = Fleet()
    late = f.envelope(msg_id="late", now_ms=f.now - 600_000)  # past its 60 s ttl: EXPIRED
    records = [f.record(f.envelope(msg_id=f"ok-{i}")) for i in range(20)]
    forged_late = f.record(late)
    forged_late["value"] += b"!"  # forged and expired: stage 4 comes first
    forged = f.record(f.envelope(msg_id="forged"))
    forged["value"] += b"!"
    misrouted = f.record(f.envelope(msg_id="misrouted", to="m-c"), host="c")
    misrouted["topic"] = f.topics.inbox("b")  # m-c's record, copied into b's inbox
    records[3:3] = [forged_late, f.record(late), forged, misrouted]
    items = [(x["topic"], x["key"], x["headers"], x["value"]) for x in records]
    batch = BatchVerifier(f.verifier("b"), threads=threads, min_batch=4)
    try:
        outcomes = batch.verify_all(items)
    finally:
        batch.close()
    one_by_one = BatchVerifier(f.verifier("b"), threads=1)._slice(items)

    def reason(o: Any) -> str | None:
        return o.reason if isinstance(o, EnvelopeError) else None

    assert [reason(o) for o in outcomes] == [reason(o) for o in one_by_one]
    assert [reason(o) for o in outcomes[3:7]] == [
        r.SIG_INVALID,
        r.EXPIRED,
        r.SIG_INVALID,
        r.TO_MISMATCH,
    ]
    assert sum(reason(o) is None for o in outcomes) == 20
