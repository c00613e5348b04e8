"""The broker a bench runs against: ``KAFKA_BOOTSTRAP`` when set (a shared broker, left as it
is), else a one-node broker of the bench's own, closed when the bench ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def kafka(name: str = "bench") -> Iterator[str]:
    """Yields the bootstrap address; a broker started here is closed on the way out, and a
    failure to close it never hides the bench's own result or error."""
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        yield env
        return
    from pipeline.testing import start_test_broker

    handle = start_test_broker(name=name)
    try:
        yield handle.bootstrap
    finally:
        with contextlib.suppress(Exception):
            handle.close()
