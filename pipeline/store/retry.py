"""Store calls retried like writes: bounded backoff on transient database errors.

A read that meets a PostgreSQL restart, a dropped connection or a locked SQLite file is tried
again with capped exponential backoff (the one rule of :mod:`pipeline.support.retrying`, +/- 20 %
jitter) for at most ``budget_s``; then (or at once, for a non-transient error such as a
constraint violation or bad SQL) it raises :class:`StoreError`, so no ``SQLAlchemyError`` escapes
a caller that uses this helper. Engines for PostgreSQL ping a pooled connection that sat idle
before use (:func:`pipeline.store.engine.ping_when_idle`), so a dead one is replaced; a connection
that dies mid-call (or within a second of its last use) is invalidated and the retry takes a
fresh one.

Only idempotent work may be wrapped: a read, or a whole transaction (a retried transaction
starts from scratch, so nothing is applied twice).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError, SQLAlchemyError

from pipeline.errors import StoreError
from pipeline.support.retrying import Backoff, retry_call

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StoreRetry:
    """Backoff for transient store errors: ``initial_s`` doubling to ``max_s``, within ``budget_s``."""

    initial_s: float = 0.05
    max_s: float = 2.0
    budget_s: float = 30.0

    @property
    def backoff(self) -> Backoff:
        return Backoff(initial_s=self.initial_s, max_s=self.max_s, jitter=0.2)


DEFAULT_RETRY = StoreRetry()


def is_transient(exc: BaseException) -> bool:
    """A database error that may pass if tried again: lost connection, server restart, lock."""
    if isinstance(exc, DisconnectionError | OperationalError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def with_retry(
    call: Callable[[], T],
    *,
    what: str,
    policy: StoreRetry = DEFAULT_RETRY,
    stop: threading.Event | None = None,
) -> T:
    """Run ``call`` until it succeeds, retrying transient errors within the policy's budget.

    Raises :class:`StoreError` (``retriable=True``) when the budget is spent or ``stop`` is set,
    and :class:`StoreError` (``retriable=False``) at once for a non-transient database error.
    """
    try:  # the common case, first time: no retry loop, backoff or closures built for it
        return call()
    except SQLAlchemyError as exc:
        if not is_transient(exc):
            raise StoreError(f"{what}: {exc}", retriable=False) from exc
        first: list[Exception] = [exc]

    def again() -> T:  # the retry loop's first attempt is the one that just failed
        if first:
            raise first.pop()
        return call()

    attempts = 1

    def report(exc: Exception, attempt: int, pause: float) -> None:
        nonlocal attempts
        attempts = attempt + 1
        log.warning("%s: transient store error (%s); retry %d in %.2fs", what, exc, attempt, pause)

    try:
        return retry_call(
            again,
            retriable=is_transient,
            backoff=policy.backoff,
            deadline_s=policy.budget_s,
            wait=time.sleep if stop is None else stop.wait,
            on_retry=report,
        )
    except SQLAlchemyError as exc:
        if not is_transient(exc):
            raise StoreError(f"{what}: {exc}", retriable=False) from exc
        raise StoreError(
            f"{what}: still failing after {attempts} attempts: {exc}",
            context={"attempts": attempts},
        ) from exc
