"""One pool member's configuration: a frozen, keyword-only value object (read at the edge)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from pipeline.kafka.topology import DAY_MS
from pipeline.retention.policy import RetentionConfig
from pipeline.runtime.lanes import Concurrency
from pipeline.runtime.retry import BackoffPolicy


class Assignment(enum.StrEnum):
    """``partition.assignment.strategy`` (librdkafka names); comparing them is the experiment."""

    RANGE = "range"
    ROUNDROBIN = "roundrobin"
    COOPERATIVE_STICKY = "cooperative-sticky"


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """A member of ``fleet.pool.<pool>``.

    ``max_poll_records`` bounds the records a member holds fetched but uncommitted (queued or
    running), so a crash redelivers at most that many (R-POOL-3: "at most one batch of
    max.poll.records"). ``instance_id`` turns static membership on. ``dedupe=False`` turns off
    the dedupe row and the stored-result reuse (the lab's comparison).

    ``step_lease_s``: how long a step key claimed through :mod:`pipeline.effects` stays held
    without a heartbeat; the member renews it every ``heartbeat_s`` (at most a third of it) while
    the step runs, so a step may take longer than the lease, and a member killed -9 frees its
    steps ``step_lease_s`` after its last beat. ``replay_window_ms``: the pool topic's
    ``retention.ms`` (what the topology creates); step keys are kept that long. ``retention``:
    how the member purges its store (dedupe rows, step results, the effect log, dead members'
    lanes rows, settled release requests; docs/store.md), ``None``: it does not. ``retry``: the
    backoff of a failed step (the runtime's one failure decision; the lab sets the scenario's)."""

    pool: str
    bootstrap: str
    store_url: str
    member: str
    instance_id: str | None = None
    assignment: Assignment = Assignment.COOPERATIVE_STICKY
    concurrency: Concurrency = Concurrency.PARTITION
    max_poll_records: int = 50
    max_in_flight: int = 64
    partition_buffer: int | None = None  # records held per partition; default by concurrency
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    dedupe: bool = True
    revoke_wait_s: float = 30.0
    topic_prefix: str = "fleet."
    partitions: int = 6  # used only when the pool topic does not exist yet
    events_path: str | None = None  # JSONL, one line per step (the lab and tests read it)
    step_lease_s: float = 30.0
    replay_window_ms: int = 7 * DAY_MS
    retention: RetentionConfig | None = field(default_factory=RetentionConfig)
    retry: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        for name in ("max_poll_records", "max_in_flight", "max_poll_interval_ms", "partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.step_lease_s <= 0:
            raise ValueError("step_lease_s must be > 0")

    @property
    def key_class(self) -> str:
        """The idempotency key class of this pool's steps."""
        return f"pool.{self.pool}"

    @property
    def heartbeat_s(self) -> float:
        """Lease renewal and lanes-row period: a third of the lease, at most 2 s."""
        return min(self.step_lease_s / 3, 2.0)

    @property
    def depth(self) -> int:
        """Partition mode: the running record plus one waiting; key mode: room for many keys."""
        if self.partition_buffer is not None:
            return self.partition_buffer
        return 2 if self.concurrency is Concurrency.PARTITION else 32


def parse_retry(spec: str) -> BackoffPolicy:
    """``--retry BASE_S:FACTOR:ATTEMPTS[:JITTER]``: waits BASE_S, BASE_S x FACTOR, ... between
    ATTEMPTS attempts (``1:2:6:0`` is R-LAB-4's 1, 2, 4, 8, 16 s), jitter a +/- fraction."""
    from pipeline.errors import ConfigError
    from pipeline.reasons import Pool

    parts = spec.split(":")
    try:
        if len(parts) not in (3, 4):
            raise ValueError("expected BASE_S:FACTOR:ATTEMPTS[:JITTER]")
        base, factor, attempts = float(parts[0]), float(parts[1]), int(parts[2])
        jitter = float(parts[3]) if len(parts) == 4 else 0.0
        top = base * factor ** max(0, attempts - 2)  # the last wait
        return BackoffPolicy(
            base_s=base, factor=factor, max_s=max(base, top), max_attempts=attempts, jitter=jitter
        )
    except (ValueError, OverflowError) as exc:
        raise ConfigError(f"--retry {spec!r}: {exc}", reason=Pool.INVALID_OPTION) from exc
