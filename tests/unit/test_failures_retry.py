"""Retry policy and classification (seed 001: classify failures first; scenario 3 retry limit)."""

from __future__ import annotations

import random

import pytest

from pipeline.errors import BrokerError, EnvelopeError, FleetError
from pipeline.failures.outcomes import ACK, RETRIES_EXHAUSTED, DeadLetter, Quarantine, Retry
from pipeline.failures.retry import BackoffPolicy, classify, is_permanent, resolve


def test_delays_grow_exponentially_within_jitter_and_cap() -> None:
    policy = BackoffPolicy(base_s=0.2, factor=2.0, max_s=1.0, max_attempts=10, jitter=0.2)
    rng = random.Random(7)
    for attempt, nominal in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        for _ in range(50):
            d = policy.delay_for(attempt, rng=rng)
            assert nominal * 0.8 - 1e-9 <= d <= min(1.0, nominal * 1.2) + 1e-9
    assert policy.delay_for(10_000) <= 1.0  # huge attempt counts neither overflow nor exceed


def test_no_jitter_is_exact_and_attempts_are_bounded() -> None:
    policy = BackoffPolicy(base_s=1, factor=2, max_s=100, max_attempts=5, jitter=0)
    assert [policy.delay_for(a) for a in range(1, 5)] == [1, 2, 4, 8]
    assert not policy.exhausted(4) and policy.exhausted(5)
    # seed 001 worked numbers: five attempts waiting 1+2+4+8 stall the key for 15 s
    assert policy.worst_case_stall_s() == 15


@pytest.mark.parametrize(
    "kwargs", [{"base_s": -1}, {"factor": 0.5}, {"max_attempts": 0}, {"jitter": 1.0}]
)
def test_bad_policy_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


def test_permanent_reasons_skip_retries_even_if_flagged_retriable() -> None:
    assert is_permanent("SIG_INVALID") and is_permanent("EXPIRED") and not is_permanent("X")
    forged = FleetError("bad sig", reason="SIG_INVALID", retriable=True)
    assert classify(forged) == DeadLetter(reason="SIG_INVALID", error=str(forged))
    # a verification failure never quarantines the key, even in an ordered flow
    assert isinstance(classify(forged, ordered=True), DeadLetter)
    bad = EnvelopeError("schema", reason="SCHEMA_INVALID")
    assert isinstance(classify(bad, ordered=True), DeadLetter)


def test_transient_and_unknown_exceptions_retry_then_handler_permanent_quarantines() -> None:
    assert isinstance(classify(BrokerError("down")), Retry)
    assert isinstance(classify(RuntimeError("boom")), Retry)
    rejected = FleetError("no such order", reason="HANDLER_REJECTED")
    assert classify(rejected, ordered=True) == Quarantine(
        reason="HANDLER_REJECTED", error=str(rejected)
    )


def test_resolve_turns_spent_budget_into_quarantine_only_for_ordered_flows() -> None:
    policy = BackoffPolicy(max_attempts=3, jitter=0)
    first = resolve(Retry(error="t"), attempt=1, policy=policy, ordered=True)
    assert first == Retry(delay_s=0.2, error="t")
    assert resolve(Retry(delay_s=5), attempt=2, policy=policy, ordered=True) == Retry(delay_s=5)
    spent = resolve(Retry(error="t"), attempt=3, policy=policy, ordered=True)
    assert spent == Quarantine(reason=RETRIES_EXHAUSTED, error="t")
    unordered = resolve(Retry(error="t"), attempt=3, policy=policy, ordered=False)
    assert unordered == DeadLetter(reason=RETRIES_EXHAUSTED, error="t")
    assert resolve(Quarantine("X"), attempt=1, policy=policy, ordered=False) == DeadLetter("X")
    assert resolve(Quarantine("EXPIRED"), attempt=1, policy=policy, ordered=True) == DeadLetter(
        "EXPIRED"
    )
    assert resolve(DeadLetter("X"), attempt=1, policy=policy, ordered=True) == DeadLetter("X")
    assert resolve(ACK, attempt=1, policy=policy, ordered=True) is ACK
