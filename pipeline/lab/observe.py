"""One tick of a run: lag per partition through the project's own lag reader, the group's
assignment per member (DescribeConsumerGroups), and the machine's CPU share."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from pipeline.kafka.clients import ClientFactory, new_admin, new_consumer
from pipeline.kafka.settings import admin_config
from pipeline.observability import KafkaOffsetReader, LagSampler, SamplerConfig

from .machine import CpuMeter


@dataclass(frozen=True, kw_only=True)
class Tick:
    t: float  # scenario seconds since the start
    wall: float  # unix time
    committed: list[int]  # per partition (-1: nothing committed yet)
    log_end: list[int]
    lag: list[int]
    lag_seconds: list[float]
    assignment: dict[str, list[int]]
    group_state: str  # the coordinator's view: STABLE, PREPARING_REBALANCE, ...
    members_up: int
    cpu_busy: float | None  # busy share of all the machine's cores (everyone's load)
    run_cores: float | None = None  # cores used by the run's own members and producer

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Observer:
    """Reads the pool group's positions (lag reader) and assignment every tick."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group: str,
        topic: str,
        partitions: int,
        admin_factory: ClientFactory = new_admin,
        consumer_factory: ClientFactory = new_consumer,
    ) -> None:
        self._reader = KafkaOffsetReader(
            bootstrap,
            fetch_budget_s=0.5,
            admin_factory=admin_factory,
            consumer_factory=consumer_factory,
        )
        # exactly our group: the prefix is the full id, and another lab run uses another id
        self._sampler = LagSampler(self._reader, SamplerConfig(groups_prefix=group, dlq_topic=None))
        self._admin = admin_factory(admin_config(bootstrap))
        self._group, self._topic, self._n = group, topic, partitions
        self._cpu = CpuMeter()

    def tick(self, *, t: float, members_up: int, run_cores: float | None = None) -> Tick:
        sample = self._sampler.sample()
        rows = {
            r.partition: r
            for r in sample.partitions
            if r.group == self._group and r.topic == self._topic
        }
        ends = self._reader.watermarks([(self._topic, p) for p in range(self._n)])
        committed = [rows[p].committed if p in rows else -1 for p in range(self._n)]
        log_end = [ends.get((self._topic, p), (0, 0))[1] for p in range(self._n)]
        lag = [rows[p].lag_messages if p in rows else log_end[p] for p in range(self._n)]
        seconds = [rows[p].lag_seconds if p in rows else 0.0 for p in range(self._n)]
        state, assignment = self._assignment()
        return Tick(
            t=t,
            wall=time.time(),
            committed=committed,
            log_end=log_end,
            lag=lag,
            lag_seconds=seconds,
            assignment=assignment,
            group_state=state,
            members_up=members_up,
            cpu_busy=self._cpu.busy(),
            run_cores=run_cores,
        )

    def _assignment(self) -> tuple[str, dict[str, list[int]]]:
        try:
            (fut,) = self._admin.describe_consumer_groups([self._group], request_timeout=5).values()
            desc = fut.result(timeout=10)
        except (KafkaException, TimeoutError):
            return "UNKNOWN", {}
        out: dict[str, list[int]] = {}
        for m in desc.members:
            name = m.group_instance_id or m.client_id or m.member_id
            parts = [
                tp.partition
                for tp in (m.assignment.topic_partitions or [])
                if tp.topic == self._topic
            ]
            out[str(name)] = sorted(parts)
        return str(getattr(desc.state, "name", desc.state)), out

    def close(self) -> None:
        self._reader.close()
