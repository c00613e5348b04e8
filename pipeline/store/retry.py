"""Store calls retried like writes: bounded backoff on transient database errors.

A read that meets a PostgreSQL restart, a dropped connection or a locked SQLite file is tried
again with capped exponential backoff for at most ``budget_s``; then (or at once, for a
non-transient error such as a constraint violation or bad SQL) it raises :class:`StoreError`, so
no ``SQLAlchemyError`` escapes a caller that uses this helper. Engines for PostgreSQL are built
with ``pool_pre_ping`` (see :func:`pipeline.store.make_engine`), so a dead pooled connection is
replaced before use; a connection that dies mid-call is invalidated and the retry takes a fresh
one.

Only idempotent work may be wrapped: a read, or a whole transaction (a retried transaction
starts from scratch, so nothing is applied twice).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError, SQLAlchemyError

from pipeline.errors import StoreError

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StoreRetry:
    """Backoff for transient store errors: ``initial_s`` doubling to ``max_s``, within ``budget_s``."""

    initial_s: float = 0.05
    max_s: float = 2.0
    budget_s: float = 30.0


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
    deadline = time.monotonic() + policy.budget_s
    delay = policy.initial_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except SQLAlchemyError as exc:
            if not is_transient(exc):
                raise StoreError(f"{what}: {exc}", retriable=False) from exc
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                raise StoreError(
                    f"{what}: still failing after {attempt} attempts: {exc}",
                    context={"attempts": attempt},
                ) from exc
            pause = min(delay * random.uniform(0.8, 1.2), left)
            log.warning(
                "%s: transient store error (%s); retry %d in %.2fs", what, exc, attempt, pause
            )
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
            delay = min(delay * 2, policy.max_s)
