"""The SQL store: one MetaData, one engine factory, versioned schema, retried calls.

Tables live beside the subsystem using them; :mod:`pipeline.store.schema` runs the Alembic
revisions in ``migrations/``; :mod:`pipeline.store.retry` retries transient errors.
"""

from .engine import (
    make_engine,
    metadata,
    read_sessions,
    readonly,
    serialize_writes,
    session_factory,
)
from .retry import DEFAULT_RETRY, StoreRetry, is_transient, with_retry

__all__ = [
    "DEFAULT_RETRY",
    "StoreRetry",
    "is_transient",
    "make_engine",
    "metadata",
    "read_sessions",
    "readonly",
    "serialize_writes",
    "session_factory",
    "with_retry",
]
