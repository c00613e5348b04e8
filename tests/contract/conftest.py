"""Fixtures the store contract tests share: a session factory on the store under test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.store import make_engine, session_factory


@pytest.fixture
def sessions(store_url: str) -> Iterator[Any]:
    """Sessions on a fresh store of each kind ``store_url`` gives (SQLite, PostgreSQL)."""
    engine = make_engine(store_url)
    yield session_factory(engine)
    engine.dispose()
