"""Fakes shared by the relay's unit tests."""

from __future__ import annotations

from typing import Any


class QuietProducer:
    """A producer for a relay that must produce nothing in the test."""

    def produce(self, *_a: Any, **_k: Any) -> None:
        raise AssertionError("nothing is produced in this test")

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0
