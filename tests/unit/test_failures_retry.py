"""Retry policy and classification (R-RETRY-1: classify failures first; R-FAIL-3)."""

from __future__ import annotations

import random

import pytest

from pipeline.errors import BrokerError, EnvelopeError, FleetError
from pipeline.runtime.decide import classify, decide
from pipeline.runtime.outcomes import ACK, RETRIES_EXHAUSTED, DeadLetter, Quarantine, Retry
from pipeline.runtime.retry import BackoffPolicy, is_permanent


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
    # R-LAB-4's numbers: five attempts waiting 1+2+4+8 stall the key for 15 s
    assert policy.worst_case_stall_s() == 15


@pytest.mark.parametrize(
    "kwargs", [{"base_s": -1}, {"factor": 0.5}, {"max_attempts": 0}, {"jitter": 1.0}]
)
def test_bad_policy_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


POLICY = BackoffPolicy(max_attempts=3, jitter=0)


def first_try(exc: BaseException, *, ordered: bool, keyed: bool = True) -> object:
    """What the runtime does with ``exc`` raised on a record's first attempt."""
    return decide(classify(exc), attempt=1, policy=POLICY, ordered=ordered, keyed=keyed)


def test_permanent_reasons_skip_retries_even_if_flagged_retriable() -> None:
    assert is_permanent("SIG_INVALID") and is_permanent("EXPIRED") and not is_permanent("X")
    forged = FleetError("bad sig", reason="SIG_INVALID", retriable=True)
    assert first_try(forged, ordered=False) == DeadLetter(reason="SIG_INVALID", error=str(forged))
    # a verification failure never quarantines the key (it is attacker-controlled)
    assert isinstance(first_try(forged, ordered=True), DeadLetter)
    bad = EnvelopeError("schema", reason="SCHEMA_INVALID")
    assert isinstance(first_try(bad, ordered=True), DeadLetter)


def test_transient_and_unknown_exceptions_retry_then_handler_permanent_quarantines() -> None:
    assert first_try(BrokerError("down"), ordered=True) == Retry(
        delay_s=0.2, error=str(BrokerError("down"))
    )
    assert isinstance(first_try(RuntimeError("boom"), ordered=True), Retry)
    rejected = FleetError("no such order", reason="HANDLER_REJECTED")
    # docs/failures.md: a permanent FleetError in an ordered flow quarantines its key ...
    assert first_try(rejected, ordered=True) == Quarantine(
        reason="HANDLER_REJECTED", error=str(rejected)
    )
    # ... and is a plain dead letter when there is no order to keep
    assert isinstance(first_try(rejected, ordered=False), DeadLetter)
    assert isinstance(first_try(rejected, ordered=True, keyed=False), DeadLetter)
    custom = FleetError("x", reason="CUSTOM", retriable=False)
    assert first_try(custom, ordered=False) == DeadLetter(reason="CUSTOM", error="[CUSTOM] x")


def test_decide_turns_spent_budget_into_quarantine_only_for_ordered_keyed_records() -> None:
    first = decide(Retry(error="t"), attempt=1, policy=POLICY, ordered=True)
    assert first == Retry(delay_s=0.2, error="t")
    assert decide(Retry(delay_s=5), attempt=2, policy=POLICY, ordered=True) == Retry(delay_s=5)
    spent = decide(Retry(error="t"), attempt=3, policy=POLICY, ordered=True)
    assert spent == Quarantine(
        reason=RETRIES_EXHAUSTED, error="RETRIES_EXHAUSTED after 3 attempts: t"
    )
    unordered = decide(Retry(error="t"), attempt=3, policy=POLICY, ordered=False)
    assert isinstance(unordered, DeadLetter) and unordered.reason == RETRIES_EXHAUSTED
    keyless = decide(Retry(error="t"), attempt=3, policy=POLICY, ordered=True, keyed=False)
    assert isinstance(keyless, DeadLetter)
    assert decide(Quarantine("X"), attempt=1, policy=POLICY, ordered=False) == DeadLetter("X")
    # the loop used to quarantine on Quarantine(SIG_INVALID): never again
    for reason in ("SIG_INVALID", "EXPIRED"):
        assert decide(Quarantine(reason), attempt=1, policy=POLICY, ordered=True) == DeadLetter(
            reason
        )
    assert decide(Quarantine("X"), attempt=1, policy=POLICY, ordered=True) == Quarantine("X")
    assert decide(DeadLetter("X"), attempt=1, policy=POLICY, ordered=True) == DeadLetter("X")
    assert decide(ACK, attempt=1, policy=POLICY, ordered=True) is ACK
