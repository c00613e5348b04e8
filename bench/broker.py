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


def local_pid(bootstrap: str) -> int | None:
    """The process listening on the first bootstrap address's port, when it is on this
    machine (the broker whose CPU a bench reads), else ``None``."""
    from pipeline.support import procfs

    port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[-1]
    return procfs.listener_pid(int(port)) if port.isdigit() else None


# A broker started moments ago is slow for its first half-minute of traffic (its JVM compiles
# the request paths as they run). Measured on a fresh broker, the bare hop at 500 msg/s for 10 s,
# four times in a row: 3,068 / 2,110 / 1,082 / 940 µs of the broker's CPU a record, one-hop p99
# 103.4 / 10.5 / 7.3 / 7.0 ms. The first section of a table read on such a broker pays it.
WARM_UP_RATE, WARM_UP_S = 500, 10.0
MIN_ROUNDS, MAX_ROUNDS = 2, 5
SETTLED = 0.8  # a round whose broker CPU per record is at least this share of the last one's


def settled(per_record: list[float]) -> bool:
    """Whether the broker's CPU per record stopped falling: the last round costs at least
    :data:`SETTLED` of the one before (at least :data:`MIN_ROUNDS` rounds)."""
    return len(per_record) >= MIN_ROUNDS and per_record[-1] >= SETTLED * per_record[-2]


def warm_up(bootstrap: str) -> dict[str, object]:
    """Offer the bare hop (:func:`bench.kafka_floor.measure`) until the broker's CPU per record
    settles (:func:`settled`), at most :data:`MAX_ROUNDS` rounds; each round's figures. On a
    broker not on this machine (no process on its port) the minimum of rounds is run."""
    from pipeline.support import procfs

    from . import kafka_floor
    from .cpu import us_per_message

    pid = local_pid(bootstrap)
    rounds: list[dict[str, object]] = []
    per_record: list[float] = []
    while len(rounds) < MAX_ROUNDS:
        before = procfs.cpu_s(pid) if pid is not None else None
        hop = kafka_floor.measure(bootstrap, rate=WARM_UP_RATE, seconds=WARM_UP_S)
        after = procfs.cpu_s(pid) if pid is not None else None
        row: dict[str, object] = {"one_hop_p99_ms": hop["one_hop_ms"].get("p99")}
        cost = None if before is None or after is None else after - before
        if (us := us_per_message(cost, int(hop["one_hop_ms"]["of"]))) is not None:
            per_record.append(us)
            row["broker_us_per_record"] = us
        rounds.append(row)
        if settled(per_record) or (pid is None and len(rounds) >= MIN_ROUNDS):
            break
    return {"rate": WARM_UP_RATE, "seconds": WARM_UP_S, "rounds": rounds}
