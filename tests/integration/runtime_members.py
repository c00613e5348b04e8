"""Two real ``ConsumerRuntime`` members of one group, stepped in turn on the real broker."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from pipeline.runtime import ConsumerRuntime


def rebalances(registry: CollectorRegistry, group: str, kind: str) -> float:
    value = registry.get_sample_value(
        "fleet_consumer_rebalances_total", {"group": group, "kind": kind}
    )
    return value or 0.0


def owned(rt: ConsumerRuntime) -> set[int]:
    return {tp.partition for tp in rt.consumer.assignment()}


def settle(members: Sequence[ConsumerRuntime], partitions: int, timeout_s: float = 60) -> None:
    """Step every member until each owns some partition and together they own all."""
    deadline = time.monotonic() + timeout_s
    while not (
        all(owned(m) for m in members) and len(set().union(*map(owned, members))) == partitions
    ):
        assert time.monotonic() < deadline, "the group never settled"
        for m in members:
            m.step()


def step_until(
    members: Sequence[ConsumerRuntime], done: Callable[[], bool], timeout_s: float = 90
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "condition never met"
        for m in members:
            m.step()
