"""pipeline.store.retry: transient store errors are retried within a bound, others are not."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from pipeline.errors import StoreError
from pipeline.store import StoreRetry, with_retry

FAST = StoreRetry(initial_s=0.001, max_s=0.002, budget_s=0.2)


def _flaky(fails: int, exc: Exception) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise exc
        return "ok"

    return calls, call


def test_a_transient_error_is_retried_until_the_call_succeeds() -> None:
    calls, call = _flaky(3, OperationalError("SELECT", {}, Exception("server closed")))
    assert with_retry(call, what="read", policy=FAST) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 4


def test_a_non_transient_error_is_raised_at_once_as_a_final_store_error() -> None:
    calls, call = _flaky(1, IntegrityError("INSERT", {}, Exception("duplicate")))
    with pytest.raises(StoreError) as caught:
        with_retry(call, what="read", policy=FAST)  # type: ignore[arg-type]
    assert len(calls) == 1 and caught.value.retriable is False


def test_the_budget_bounds_the_retries_and_ends_in_a_retriable_store_error() -> None:
    calls, call = _flaky(10**9, OperationalError("SELECT", {}, Exception("refused")))
    with pytest.raises(StoreError) as caught:
        with_retry(call, what="read", policy=FAST)  # type: ignore[arg-type]
    assert caught.value.retriable is True and 1 < len(calls) < 10**9
