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


def append_linger_ms(bootstrap: str) -> str | None:
    """The broker's ``group.coordinator.append.linger.ms`` (the synchronous commit before an
    inject waits it out): recorded beside the figures, ``None`` when it cannot be read."""
    try:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            ConfigResource,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": bootstrap})
        broker = next(iter(admin.list_topics(timeout=10).brokers))
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        entries = admin.describe_configs([resource])[resource].result(10)
        entry = entries.get("group.coordinator.append.linger.ms")
        return None if entry is None else str(entry.value)
    except Exception:  # noqa: BLE001 - a figure beside the rows, never a reason to fail them
        return None
